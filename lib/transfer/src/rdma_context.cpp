// The engine's RDMA device (mc::verbs::device) plus MR bookkeeping.
#include "rdma_verbs.hpp"

#include "engine_impl.hpp"
#include "rdma.hpp"

#include <arpa/inet.h>

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

rdma_context::rdma_context(const engine_options& opts) : mc::verbs::device(device_options_of(opts)) {}

rdma_context::~rdma_context() {
  {
    std::unique_lock lk(m_);
    for (auto& [t, mr] : by_token_) ibv_dereg_mr(mr);
    by_token_.clear();
    by_base_.clear();
  }
}

void rdma_context::attach(std::uint64_t token, ibv_mr* mr) {
  std::unique_lock lk(m_);
  by_token_.emplace(token, mr);
  by_base_.emplace(reinterpret_cast<std::uintptr_t>(mr->addr), mr);
}

void rdma_context::detach(std::uint64_t token) noexcept {
  ibv_mr* mr = nullptr;
  {
    std::unique_lock lk(m_);
    auto it = by_token_.find(token);
    if (it == by_token_.end()) return;
    mr = it->second;
    by_token_.erase(it);
    auto [b, e] = by_base_.equal_range(reinterpret_cast<std::uintptr_t>(mr->addr));
    for (; b != e; ++b)
      if (b->second == mr) {
        by_base_.erase(b);
        break;
      }
  }
  ibv_dereg_mr(mr);
}

std::optional<std::uint32_t> rdma_context::local_lkey(const void* addr, std::size_t len) const {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::shared_lock lk(m_);
  auto b = by_base_.upper_bound(a);
  for (int i = 0; i < 16 && b != by_base_.begin(); ++i) {
    --b;
    const auto base = b->first;
    if (a - base <= b->second->length && len <= b->second->length - (a - base)) return b->second->lkey;
  }
  return std::nullopt;
}

// ---- engine hooks ------------------------------------------------------------

bool rdma_built() noexcept { return true; }

std::shared_ptr<rdma_context> make_rdma_context(const engine_options& opts) {
  return std::make_shared<rdma_context>(opts);
}

mc::result<std::uint64_t> rdma_register(engine_impl& eng, void* addr, std::size_t len) {
  auto base = reinterpret_cast<std::uintptr_t>(addr);
  if (addr == nullptr || len == 0 || base + len < base) return fail(errc::invalid_params);
  auto mr = eng.rdma_ctx_->reg_mr(addr, len);
  if (!mr) return mr.error();
  // attach before the token is visible to anyone: the registry's add publishes it.
  auto t = eng.registry_->add(addr, len, (*mr)->rkey);
  if (!t) {
    ibv_dereg_mr(*mr);
    return t.error();
  }
  eng.rdma_ctx_->attach(*t, *mr);
  return t;
}

void rdma_deregister(rdma_context& ctx, std::uint64_t token) noexcept { ctx.detach(token); }

}  // namespace mc::transfer::detail
