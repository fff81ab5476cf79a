// mc::transfer::region: the RAII handle of a registration.
#include "mc/transfer/engine.hpp"
#include "registry.hpp"

#include <stdexcept>
#include <utility>

namespace mc::transfer {

region::region(std::shared_ptr<detail::registry> reg, std::uint64_t token, std::uint64_t id, std::byte* base,
               std::size_t length, std::string endpoint) noexcept
    : registry_(std::move(reg)), token_(token), id_(id), base_(base), length_(length), endpoint_(std::move(endpoint)) {}

region::region(region&& o) noexcept
    : registry_(std::move(o.registry_)),
      token_(std::exchange(o.token_, 0)),
      id_(std::exchange(o.id_, 0)),
      base_(std::exchange(o.base_, nullptr)),
      length_(std::exchange(o.length_, 0)),
      endpoint_(std::move(o.endpoint_)),
      memory_(std::move(o.memory_)) {}

region& region::operator=(region&& o) noexcept {
  if (this != &o) {
    reset();
    registry_ = std::move(o.registry_);
    token_ = std::exchange(o.token_, 0);
    id_ = std::exchange(o.id_, 0);
    base_ = std::exchange(o.base_, nullptr);
    length_ = std::exchange(o.length_, 0);
    endpoint_ = std::move(o.endpoint_);
    memory_ = std::move(o.memory_);
  }
  return *this;
}

region::~region() { reset(); }

void region::reset() noexcept {
  // Exactly this entry: after a cascade (the parent went first) the token
  // may in theory name a newer registration.
  if (token_ != 0 && registry_) (void)registry_->remove(token_, id_);
  registry_.reset();
  token_ = 0;
  id_ = 0;
  base_ = nullptr;
  length_ = 0;
  memory_.reset();  // after the unregistration: no new access starts on it
}

remote_buffer region::describe(std::uint64_t offset, std::uint64_t length) const {
  if (offset > length_ || length > length_ - offset)
    throw std::out_of_range("transfer: region::describe range outside the region");
  return remote_buffer{endpoint_, reinterpret_cast<std::uintptr_t>(base_) + offset, length, token_};
}

}  // namespace mc::transfer
