// Tier set-up (DRAM arena, SSD cache file), staging pool, backend creation.
#include "backend_core.hpp"

#include <sys/file.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace mc::tiered::detail {

namespace {
config_error tier_error(const tier& t, mc::errc code, const std::string& what) {
  return config_error{
      code, "tiers[" + std::to_string(t.index) + "] (" + std::string(tier_type_name(t.cfg.type)) + "): " + what};
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

/// Faults in [p, p + n) now (a DRAM tier's `prefault`): MADV_POPULATE_WRITE,
/// or where the kernel lacks it a write to every 4 KiB page (the arena is
/// fresh anonymous memory: zeroes).
void populate(std::byte* p, std::size_t n) {
  if (::madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
  for (std::size_t i = 0; i < n; i += 4096) reinterpret_cast<volatile std::byte*>(p)[i] = std::byte{0};
}
}  // namespace

tier::tier(tier_config c, std::size_t i)
    : cfg(std::move(c)), index(i), alloc_(cfg.capacity, cfg.type == tier_type::dram ? dram_alignment : ssd_alignment) {}

tier::~tier() {
  if (arena) ::munmap(arena, arena_len);
  file.close();
  if (lock_fd >= 0) ::close(lock_fd);
}

config_result<void> tier::open() {
  if (cfg.type == tier_type::dram) {
    arena_len = static_cast<std::size_t>(alloc_.capacity());
    void* p = ::mmap(nullptr, arena_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return tier_error(*this, mc::errc::no_available_handle,
                        "cannot map " + std::to_string(arena_len) + " bytes: " + std::strerror(errno));
    arena = static_cast<std::byte*>(p);
    ::madvise(arena, arena_len, MADV_HUGEPAGE);  // best effort
    // Populated after the advice, so that the pages are huge ones (MAP_POPULATE
    // at the mmap filled the arena with 4 KiB pages before the advice came).
    if (cfg.prefault) populate(arena, arena_len);
    return {};
  }
  std::error_code ec;
  std::filesystem::create_directories(cfg.path, ec);
  if (ec) return tier_error(*this, mc::errc::invalid_params, "path '" + cfg.path + "': " + ec.message());
  const std::string name = cfg.path + "/mooncake-tier-" + std::to_string(index) + ".cache";
  lock_fd = ::open(name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return tier_error(*this, mc::errc::io_error, name + ": " + std::strerror(errno));
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
    return tier_error(*this, mc::errc::unavailable_in_current_status, name + " is in use by another process");
  auto f = mc::runtime::uring_file::open(name, mc::runtime::file_mode::create_truncate);
  if (!f)
    return tier_error(
        *this, mc::to_errc(f.error()),
        name + ": " + mc::runtime::last_io_error().message +
            (mc::is(f.error(), mc::errc::unsupported) ? " (the filesystem does not support O_DIRECT)" : ""));
  file = std::move(*f);
  if (auto a = file.allocate(alloc_.capacity()); !a)
    return tier_error(
        *this, mc::to_errc(a.error()),
        "preallocating " + std::to_string(alloc_.capacity()) + " bytes: " + mc::runtime::last_io_error().message);
  return {};
}

std::optional<allocation> tier::try_alloc(std::uint64_t size) {
  std::lock_guard lk(m_);
  return alloc_.allocate(size);
}

void tier::release(const allocation& a) noexcept {
  std::lock_guard lk(m_);
  alloc_.free(a);
}

void tier::enqueue(value* v) noexcept {
  v->q_prev = nullptr;
  v->q_next = q_head;
  if (q_head) q_head->q_prev = v;
  q_head = v;
  if (!q_tail) q_tail = v;
}

void tier::dequeue(value* v) noexcept {
  if (v->q_prev)
    v->q_prev->q_next = v->q_next;
  else
    q_head = v->q_next;
  if (v->q_next)
    v->q_next->q_prev = v->q_prev;
  else
    q_tail = v->q_prev;
  v->q_prev = v->q_next = nullptr;
}

offset_allocator::stats tier::stats() const {
  std::lock_guard lk(m_);
  return alloc_.get_stats();
}

backend_core::backend_core(mc::runtime::runtime& rt, backend_options o) : opts(o), rt_(rt) {}

backend_core::~backend_core() {
  for (auto& sh : shards_) {
    std::lock_guard lk(sh.m);
    sh.map.clear();  // values free their space while the tiers still exist
  }
  staging_reg.reset();
  if (staging) ::munmap(staging, staging_len);
}

config_result<void> backend_core::open(std::vector<tier_config> cfgs) {
  if (auto v = validate_tiers(cfgs); !v) return v.error();
  if (opts.staging_buffers == 0 || opts.staging_chunk_size == 0 ||
      !mc::runtime::is_direct_aligned(opts.staging_chunk_size))
    return config_error{mc::errc::invalid_params,
                        "staging: staging_buffers must be > 0 and staging_chunk_size a positive multiple of 4096"};
  std::stable_sort(cfgs.begin(), cfgs.end(), [](auto& a, auto& b) { return a.priority > b.priority; });
  for (std::size_t i = 0; i < cfgs.size(); ++i) {
    tiers.push_back(std::make_unique<tier>(cfgs[i], i));
    if (auto r = tiers.back()->open(); !r) return r.error();
  }
  // One extra chunk at the end is reserved for demotions.
  staging_len = opts.staging_chunk_size * (opts.staging_buffers + 1);
  void* p = ::mmap(nullptr, staging_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    staging_len = 0;
    return config_error{mc::errc::no_available_handle, std::string("staging: cannot map: ") + std::strerror(errno)};
  }
  staging = static_cast<std::byte*>(p);
  if (auto reg = mc::runtime::register_fixed_buffer({staging, staging_len}); reg) staging_reg = std::move(*reg);
  for (unsigned i = 0; i < opts.staging_buffers; ++i)
    free_staging_.push_back(static_cast<unsigned>(opts.staging_buffers - 1 - i));
  return {};
}

}  // namespace mc::tiered::detail

namespace mc::tiered {

tiered_backend::tiered_backend(std::unique_ptr<detail::backend_core> core) : core_(std::move(core)) {}
tiered_backend::~tiered_backend() = default;

config_result<std::unique_ptr<tiered_backend>> tiered_backend::create(mc::runtime::runtime& rt,
                                                                      std::vector<tier_config> tiers,
                                                                      backend_options opts) {
  auto core = std::make_unique<detail::backend_core>(rt, opts);
  if (auto r = core->open(std::move(tiers)); !r) return r.error();
  return std::unique_ptr<tiered_backend>(new tiered_backend(std::move(core)));
}

std::vector<std::span<std::byte>> tiered_backend::dram_regions() const {
  std::vector<std::span<std::byte>> out;
  for (auto& t : core_->tiers)
    if (t->cfg.type == tier_type::dram) out.emplace_back(t->arena, t->arena_len);
  out.emplace_back(core_->staging, core_->staging_len);
  return out;
}

std::span<std::byte> tiered_backend::staging_region() const { return {core_->staging, core_->staging_len}; }
std::size_t tiered_backend::staging_chunk_size() const { return core_->opts.staging_chunk_size; }
bool tiered_backend::staging_registered() const { return core_->staging_reg.registered(); }

}  // namespace mc::tiered
