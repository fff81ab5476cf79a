#pragma once
// The engine's view of the verbs transport (issue 8). No verbs type here:
// engine.cpp / tcp_server.cpp include this whether or not libibverbs was
// found at build time (rdma_stub.cpp implements it without verbs).
//
// Descriptor token with RDMA: the registry's 64-bit token is
//   (random 32 bits << 32) | rkey
// of the region's memory region on the engine's RDMA device. A TCP peer
// checks all 64 bits exactly as before; an RDMA peer posts READ/WRITE work
// requests with the low 32 bits as rkey. So one remote_buffer serves both
// transports and mixed clusters fall back to TCP without a format change.
// Without protocol "rdma" tokens stay fully random (TCP unchanged).
//
// Derived registrations (engine::register_within) have no MR of their own:
// token = ((random 31 bits | 1 << 31) << 32) | the parent's rkey (bit 63 =
// derived_token_bit). The NIC checks only the rkey, i.e. the parent's MR; so
// an initiator validates a derived token's range and access with the target
// (rdma_check on the QP's control connection) before its first READ/WRITE
// with it on each QP, and the target's engine::fence kills every QP that
// could still carry a request validated before a revocation.
//
// Several devices (engine_options::device_names lists more than one): every
// region has an MR on every device; the token keeps device 0's rkey, the
// rkeys on devices k > 0 are served by wire op rdma_rkey. Our device k talks
// to the peer's device k (see rdma_transport.cpp).
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/transfer/engine.hpp"
#include "registry.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace mc::transfer::detail {

class engine_impl;
class transport;
struct thread_state;
struct header;
class rdma_context;

/// True when the library was built with libibverbs.
bool rdma_built() noexcept;

/// Opens the device(s): with an empty `opts.device_names` (or one name) the
/// first usable device, with several names every usable listed device (list
/// order = device index). Throws std::invalid_argument with a clear message
/// when none is usable (or the build has no verbs support).
std::shared_ptr<rdma_context> make_rdma_context(const engine_options& opts);

/// The initiator side (one per engine with protocol "rdma").
std::unique_ptr<transport> make_rdma_transport(engine_impl& eng);

/// Registers the memory region (MR) for [addr, addr+len) on every device with
/// the least verbs access `rights` needs (local_only: LOCAL_WRITE only;
/// remote_read adds REMOTE_READ; remote_write adds REMOTE_WRITE) and adds the
/// region to the registry with device 0's rkey in the low 32 bits of its token.
mc::result<added_region> rdma_register(engine_impl& eng, void* addr, std::size_t len, region_access rights,
                                       bool derivable, std::shared_ptr<const shared_memory> shared = nullptr);
/// Deregisters the MR of `token` (the registry calls it after revocation).
void rdma_deregister(rdma_context& ctx, std::uint64_t token) noexcept;

/// Serves wire ops rdma_connect / rdma_check / rdma_rkey on an inbound TCP
/// connection. `payload`: the h.length bytes that followed an rdma_connect
/// (the caller read them, at most max_rdma_payload), empty for the others.
/// `slot` keeps the target-side QP alive as long as the connection. False:
/// close the connection.
task<bool> rdma_serve(engine_impl& eng, boost::asio::ip::tcp::socket& s, const header& h,
                      std::span<const std::byte> payload, std::shared_ptr<void>& slot);

/// engine::fence, served side: moves every served QP whose initiator
/// announced `peer` as its endpoint (or announced none) to the error state
/// and shuts its control connection down; returns how many. Any thread.
std::size_t rdma_fence_served(rdma_context& ctx, const std::string& peer) noexcept;
/// engine::fence, initiator side, on thread `ts`: moves every QP of ours to
/// `peer` to the error state and drops the idle ones; returns how many.
std::size_t rdma_fence_thread(thread_state& ts, const std::string& peer) noexcept;

/// Appends one rdma_device_stats per opened device to `out`.
void rdma_device_stats_of(const rdma_context& ctx, std::vector<rdma_device_stats>& out);

/// engine stop, on thread `ts`: moves every QP of the thread to the error
/// state and wakes every waiter (first phase), then releases every verbs
/// object of the thread (second phase, after the engine's gate closed).
void rdma_close_thread(thread_state& ts) noexcept;
void rdma_release_thread(thread_state& ts) noexcept;

}  // namespace mc::transfer::detail
