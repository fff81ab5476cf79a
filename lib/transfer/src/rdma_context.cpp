// The engine's RDMA devices (mc::verbs::device, one per rail) plus MR
// bookkeeping.
#include "rdma_verbs.hpp"

#include "engine_impl.hpp"
#include "rdma.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace mc::transfer::detail {
namespace {
mc::verbs::device_options device_options_of(const engine_options& o) {
  mc::verbs::device_options d;
  d.device_names = o.device_names;
  d.gid_index = o.gid_index;
  d.who = "transfer: protocol 'rdma'";
  return d;
}
}  // namespace

rdma_context::rdma_context(const engine_options& opts) {
  auto d = device_options_of(opts);
  if (opts.device_names.size() <= 1) {
    // Empty list (the first usable device) or one name: exactly as before.
    devs_.push_back(std::make_unique<mc::verbs::device>(d));
  } else {
    // An explicit list: every usable listed device, in list order.
    std::string why;
    std::vector<std::string> seen;
    for (const auto& name : opts.device_names) {
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
      seen.push_back(name);
      auto one = d;
      one.device_names = {name};
      try {
        devs_.push_back(std::make_unique<mc::verbs::device>(one));
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "transfer: rdma: device '%s' not used: %s\n", name.c_str(), e.what());
        why = e.what();
      }
    }
    if (devs_.empty()) throw std::invalid_argument(why);
  }
  counters_ = std::make_unique<rdma_device_counters[]>(devs_.size());
}

rdma_context::~rdma_context() {
  std::unique_lock lk(m_);
  for (auto& [t, mrs] : by_token_)
    for (auto* mr : mrs) ibv_dereg_mr(mr);
  by_token_.clear();
  by_base_.clear();
}

int mr_access_of(region_access rights) noexcept {
  int a = IBV_ACCESS_LOCAL_WRITE;  // the NIC writes into our READ destinations
  if (grants(rights, region_access::remote_read)) a |= IBV_ACCESS_REMOTE_READ;
  if (grants(rights, region_access::remote_write)) a |= IBV_ACCESS_REMOTE_WRITE;
  return a;
}

mc::result<std::vector<ibv_mr*>> rdma_context::reg_all(void* addr, std::size_t len, int access) noexcept {
  std::vector<ibv_mr*> mrs;
  for (auto& d : devs_) {
    auto mr = d->reg_mr(addr, len, access);
    if (!mr) {
      for (auto* m : mrs) ibv_dereg_mr(m);
      return mr.error();
    }
    mrs.push_back(*mr);
  }
  return mrs;
}

void rdma_context::attach(std::uint64_t token, std::vector<ibv_mr*> mrs) {
  std::unique_lock lk(m_);
  auto it = by_token_.emplace(token, std::move(mrs)).first;
  by_base_.emplace(reinterpret_cast<std::uintptr_t>(it->second.front()->addr), &it->second);
}

void rdma_context::detach(std::uint64_t token) noexcept {
  std::vector<ibv_mr*> mrs;
  {
    std::unique_lock lk(m_);
    auto it = by_token_.find(token);
    if (it == by_token_.end()) return;
    auto [b, e] = by_base_.equal_range(reinterpret_cast<std::uintptr_t>(it->second.front()->addr));
    for (; b != e; ++b)
      if (b->second == &it->second) {
        by_base_.erase(b);
        break;
      }
    mrs = std::move(it->second);
    by_token_.erase(it);
  }
  for (auto* mr : mrs) ibv_dereg_mr(mr);
}

std::optional<std::uint32_t> rdma_context::local_lkey(std::size_t k, const void* addr, std::size_t len) const {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::shared_lock lk(m_);
  auto b = by_base_.upper_bound(a);
  for (int i = 0; i < 16 && b != by_base_.begin(); ++i) {
    --b;
    const auto base = b->first;
    const ibv_mr* mr = (*b->second)[k];
    if (a - base <= mr->length && len <= mr->length - (a - base)) return mr->lkey;
  }
  return std::nullopt;
}

std::optional<std::uint32_t> rdma_context::rkey(std::uint64_t token, std::size_t k) const {
  std::shared_lock lk(m_);
  auto it = by_token_.find(token);
  if (it == by_token_.end() || k >= it->second.size()) return std::nullopt;
  return it->second[k]->rkey;
}

void rdma_context::add_served(const void* key, ibv_qp* qp, int fd, std::string peer) {
  std::lock_guard lk(served_m_);
  served_[key] = served_qp{qp, fd, std::move(peer)};
}

void rdma_context::remove_served(const void* key) noexcept {
  std::lock_guard lk(served_m_);
  served_.erase(key);
}

std::size_t rdma_context::fence_served(const std::string& peer) noexcept {
  std::size_t n = 0;
  std::lock_guard lk(served_m_);
  for (auto it = served_.begin(); it != served_.end();) {
    if (!it->second.peer.empty() && it->second.peer != peer) {
      ++it;
      continue;
    }
    // ERR: our NIC answers nothing on this QP any more (the peer's requests
    // on it fail); the control connection's shutdown tells the peer at once
    // (its transfer fails with transfer_fail, not retried) and ends the
    // serving coroutine, which destroys the QP. Both calls are thread-safe;
    // the QP and the descriptor stay valid while they are in the map.
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(it->second.qp, &a, IBV_QP_STATE);
    ::shutdown(it->second.fd, SHUT_RDWR);
    it = served_.erase(it);
    ++n;
  }
  return n;
}

// ---- engine hooks ------------------------------------------------------------

bool rdma_built() noexcept { return true; }

std::shared_ptr<rdma_context> make_rdma_context(const engine_options& opts) {
  return std::make_shared<rdma_context>(opts);
}

mc::result<added_region> rdma_register(engine_impl& eng, void* addr, std::size_t len, region_access rights,
                                       bool derivable, std::shared_ptr<const shared_memory> shared) {
  auto base = reinterpret_cast<std::uintptr_t>(addr);
  if (addr == nullptr || len == 0 || base + len < base) return fail(errc::invalid_params);
  auto mrs = eng.rdma_ctx_->reg_all(addr, len, mr_access_of(rights));
  if (!mrs) return mrs.error();
  // The token keeps device 0's rkey: TCP and single-device peers see no change.
  // attach before the token is visible to anyone: the registry's add publishes it.
  bump(eng.counters_.rdma_regs, mrs->size());
  auto t = eng.registry_->add(addr, len, rights, mrs->front()->rkey, derivable, std::move(shared));
  if (!t) {
    for (auto* m : *mrs) ibv_dereg_mr(m);
    return t.error();
  }
  eng.rdma_ctx_->attach(t->token, std::move(*mrs));
  return t;
}

std::size_t rdma_fence_served(rdma_context& ctx, const std::string& peer) noexcept { return ctx.fence_served(peer); }

void rdma_deregister(rdma_context& ctx, std::uint64_t token) noexcept { ctx.detach(token); }

void rdma_device_stats_of(const rdma_context& ctx, std::vector<rdma_device_stats>& out) {
  for (std::size_t k = 0; k < ctx.device_count(); ++k) {
    auto& c = ctx.counters(k);
    out.push_back({ctx.dev(k).name(), c.ops.load(std::memory_order_relaxed), c.bytes.load(std::memory_order_relaxed)});
  }
}

}  // namespace mc::transfer::detail
