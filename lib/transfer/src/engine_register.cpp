// engine: registrations (a region of its own, or derived inside one already
// registered) and their lookup.
#include "engine_impl.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace mc::transfer {

mc::result<region> engine::register_memory(void* addr, std::size_t len, region_access access, bool derivable) {
  if (impl_->stopping_) return fail(errc::shutting_down);
  if (static_cast<std::uint8_t>(access) > 3) return fail(errc::invalid_params);
  // Memory from allocate_shared_memory(): same-host peers may map it.
  auto shared = detail::shared_allocation_of(addr, len);
  auto t = impl_->rdma_ctx_ ? detail::rdma_register(*impl_, addr, len, access, derivable, shared)
                            : impl_->registry_->add(addr, len, access, std::nullopt, derivable, shared);
  if (!t) return t.error();
  return region(impl_->registry_, t->token, t->id, static_cast<std::byte*>(addr), len, impl_->endpoint_);
}

mc::result<region> engine::register_within(const region& parent, std::uint64_t offset, std::uint64_t length,
                                           region_access access) {
  if (impl_->stopping_) return fail(errc::shutting_down);
  if (static_cast<std::uint8_t>(access) > 3 || !parent || parent.registry_ != impl_->registry_ ||
      offset > parent.size() || length > parent.size() - offset)
    return fail(errc::invalid_params);
  const auto addr = reinterpret_cast<std::uintptr_t>(parent.data()) + offset;
  auto t = impl_->registry_->add_child(parent.token(), parent.id_, addr, length, access);
  if (!t) return t.error();
  detail::bump(impl_->counters_.derived);
  return region(impl_->registry_, t->token, t->id, parent.data() + offset, length, impl_->endpoint_);
}

namespace {

/// Inserts a derived registration (`insert(parent token, parent id)`) into
/// the top-level registration that find_containing gives for [at, at +
/// len) with `access`, when it also holds [lo, hi). The parent may be
/// unregistered between the lookup and the insert (out_of_range): looks
/// again, a bounded number of times. out_of_range when none holds them.
template <class Insert>
mc::result<detail::added_region> derive_in_containing(const detail::registry& reg, std::uint64_t at, std::uint64_t len,
                                                      std::uint64_t lo, std::uint64_t hi, region_access access,
                                                      Insert insert) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto parent = reg.find_containing(at, len, access);
    if (!parent) return fail(errc::out_of_range);
    if (lo < parent->base || hi - parent->base > parent->length) return fail(errc::out_of_range);
    auto t = insert(parent->token, parent->id);
    if (t || !mc::is(t.error(), errc::out_of_range)) return t;
  }
  return fail(errc::out_of_range);
}

}  // namespace

mc::result<region> engine::register_within(const void* addr, std::size_t len, region_access access) {
  if (impl_->stopping_) return fail(errc::shutting_down);
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (static_cast<std::uint8_t>(access) > 3 || addr == nullptr || len == 0 || a + len < a)
    return fail(errc::invalid_params);
  auto& reg = *impl_->registry_;
  auto t = derive_in_containing(reg, a, len, a, a + len, access, [&](std::uint64_t token, std::uint64_t id) {
    return reg.add_child(token, id, a, len, access);
  });
  if (!t) return t.error();
  detail::bump(impl_->counters_.derived);
  return region(impl_->registry_, t->token, t->id, static_cast<std::byte*>(const_cast<void*>(addr)), len,
                impl_->endpoint_);
}

mc::result<region> engine::register_pieces_within(std::span<const std::span<std::byte>> pieces, region_access access) {
  if (impl_->stopping_) return fail(errc::shutting_down);
  if (static_cast<std::uint8_t>(access) > 3 || pieces.empty() || pieces.size() > detail::registry::max_child_ranges)
    return fail(errc::invalid_params);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  ranges.reserve(pieces.size());
  std::uint64_t lo = ~0ull, hi = 0;
  for (auto& p : pieces) {
    const auto a = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p.data()));
    if (p.data() == nullptr || p.empty() || a + p.size() < a) return fail(errc::invalid_params);
    ranges.emplace_back(a, p.size());
    lo = std::min(lo, a);
    hi = std::max(hi, a + p.size());
  }
  auto& reg = *impl_->registry_;
  auto t = derive_in_containing(
      reg, ranges.front().first, ranges.front().second, lo, hi, access,
      [&](std::uint64_t token, std::uint64_t id) { return reg.add_child_ranges(token, id, ranges, access); });
  if (!t) return t.error();
  detail::bump(impl_->counters_.derived);
  return region(impl_->registry_, t->token, t->id, reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(lo)),
                static_cast<std::size_t>(hi - lo), impl_->endpoint_);
}

std::optional<registration_info> engine::find_registration(const void* addr, std::size_t len,
                                                           region_access need) const {
  auto p = impl_->registry_->find_containing(reinterpret_cast<std::uintptr_t>(addr), len, need);
  if (!p) return std::nullopt;
  return registration_info{reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(p->base)),
                           static_cast<std::size_t>(p->length), p->token, p->rights};
}

mc::result<void> engine::unregister_memory(std::uint64_t token) { return impl_->registry_->remove(token); }

}  // namespace mc::transfer
