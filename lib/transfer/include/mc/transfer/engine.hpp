#pragma once
/// The TransferEngine: registered memory and batch READ/WRITE between peers.
///
/// Every engine listens (serves READ/WRITE requests of peers against its own
/// registered regions) and initiates (moves bytes between a local span and a
/// peer's `remote_buffer`). See lib/transfer/README.md for the wire protocol,
/// transport selection and the unregistration semantics.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/transfer/types.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mc::runtime {
class runtime;
}

namespace mc::transfer {

namespace detail {
class registry;
class engine_impl;
}  // namespace detail

/// Configuration. Invalid values make the engine constructor throw
/// std::invalid_argument (startup errors are exceptions).
struct engine_options {
  /// Address the TCP listener binds to ("0.0.0.0", "::", "127.0.0.1", ...).
  std::string bind_host = "0.0.0.0";
  /// TCP port; 0 = ephemeral (read the chosen one from endpoint()).
  std::uint16_t port = 0;
  /// Host put into endpoint(). Empty: bind_host when it is a specific
  /// address, else the first non-loopback IPv4 address of an interface that
  /// is up (127.0.0.1 only when the host has none).
  std::string advertise_host;
  /// Large requests are cut into slices of this size, spread over the
  /// connections of a peer; over TCP, consecutive smaller requests of one
  /// batch to one peer (same direction) travel together as one
  /// scatter-gather request of up to this many bytes and 64 pieces.
  /// 4 KiB .. 64 MiB.
  std::size_t slice_size = 1u << 20;
  /// Upper bound of TCP connections to one peer, per runtime thread (a pool
  /// never grows beyond it; same bound for same-host control connections).
  std::size_t connections_per_peer = 4;
  /// Upper bound of TCP connections to one peer, per runtime thread, that
  /// calls (engine::call) may hold, transfers' connections included: a call
  /// holds its connection for its whole exchange (the peer's handler may
  /// wait, e.g. for its own master), so calls in flight beyond
  /// connections_per_peer open more connections, up to this bound, instead
  /// of queueing behind each other. Transfers never use more than
  /// connections_per_peer at once (they may take idle ones a call opened).
  /// connections_per_peer .. 64; values below connections_per_peer count as
  /// connections_per_peer.
  std::size_t call_connections_per_peer = 16;
  /// Upper bound of peers with pooled connections, per runtime thread; the
  /// least recently used idle pool is closed to make room.
  std::size_t max_peers = 256;
  /// Upper bound of inbound (served) connections; more are refused.
  std::size_t max_inbound_connections = 4096;
  /// A same-host or in-process batch's bytes to one peer of at least twice
  /// this size are cut into parts of at least this size (an item may be
  /// cut), one per runtime thread up to the runtime's size, moved
  /// concurrently: those transfers are copies this process makes alone, so
  /// a large batch uses several cores. The calling thread moves the first
  /// part. Never over TCP (both ends already share the kernel's work; a
  /// second sender only contended with the receiver) nor RDMA; in auto mode
  /// a batch is cut unless the peer is known not to be on this host.
  /// 0 = never cut. At least 64 KiB otherwise.
  std::size_t spread_bytes = 4u << 20;
  /// Use cross-memory attach when the peer is on this host.
  bool enable_same_host = true;
  /// Copy directly when the peer engine lives in this process.
  bool enable_in_process = true;
  /// Force one transport for every transfer this engine initiates (tests and
  /// benchmarks). Transfers fail with errc::unsupported when the forced
  /// transport cannot reach the peer.
  std::optional<transport_kind> force;
  /// Timeout of read()/write()/batch() when none is given.
  std::chrono::steady_clock::duration default_timeout = std::chrono::seconds(10);
  /// "tcp" (default) or "rdma": transfers to peers that speak RDMA use RC
  /// queue pairs (RDMA READ/WRITE); peers without RDMA are reached over TCP.
  /// "rdma" throws std::invalid_argument when no RDMA device is usable or the
  /// library was built without libibverbs.
  std::string protocol = "tcp";
  /// RDMA devices to use ("mlx5_0", "rxe0"). Empty: the first device with an
  /// active port carries the traffic. Several names: every usable listed
  /// device is used together (multi-rail; our k-th device talks to the
  /// peer's k-th device, unusable names are skipped with a message).
  std::vector<std::string> device_names;
  /// GID table index for RoCE (e.g. 1 or 3 for RoCE v2); -1 = automatic (a
  /// RoCE v2 IPv4-mapped GID if present).
  int gid_index = -1;
};

/// Initiated-side counters of one transport (a snapshot).
struct transport_counters {
  std::uint64_t read_ops = 0;
  std::uint64_t read_bytes = 0;
  std::uint64_t write_ops = 0;
  std::uint64_t write_bytes = 0;
  std::uint64_t errors = 0;  ///< requests that failed (any reason)
};

/// Initiated-side traffic one RDMA device carried (protocol "rdma"): slices
/// (work requests) that completed successfully and their bytes.
struct rdma_device_stats {
  std::string name;  ///< e.g. "mlx5_0", "rxe0"
  std::uint64_t ops = 0;
  std::uint64_t bytes = 0;
};

/// Bytes of one call's request and of its reply at most (engine::call).
inline constexpr std::size_t max_call_request_bytes = std::size_t{2} << 20;
inline constexpr std::size_t max_call_reply_bytes = std::size_t{2} << 20;

/// One call as its handler sees it (engine::set_call_handler).
struct call_request {
  /// The request's bytes, as the peer sent them (untrusted; valid until the
  /// handler's task completes).
  std::span<const std::byte> payload;
  /// The reply bytes the peer accepts at most (1..2 MiB).
  std::uint64_t reply_capacity = 0;
  /// The peer's IP address as the kernel reports it (never from the peer's
  /// bytes).
  std::string peer_ip;
};

/// Serves calls: returns the reply (at most reply_capacity bytes) or an
/// mc::errc error that travels back to the caller. Runs on the runtime
/// thread of the connection the call arrived on; may co_await; must not
/// block the thread.
using call_handler = std::function<mc::task<mc::result<std::vector<std::byte>>>(call_request)>;

/// Snapshot of the engine's counters (taken with relaxed loads; each value is
/// exact, the set is not one atomic instant).
struct engine_stats {
  /// Indexed by transport_kind.
  std::array<transport_counters, transport_kind_count> initiated{};
  /// READ requests served (TCP + same-host grants). Here and in
  /// served_write_ops a TCP scatter-gather request counts once, whatever
  /// its number of pieces.
  std::uint64_t served_read_ops = 0;
  std::uint64_t served_read_bytes = 0;
  std::uint64_t served_write_ops = 0;
  std::uint64_t served_write_bytes = 0;
  std::uint64_t served_rejects = 0;        ///< requests refused (token / range / access / revoked)
  std::uint64_t outbound_connections = 0;  ///< open pooled TCP connections
  std::uint64_t inbound_connections = 0;   ///< open served connections
  /// Same-host attempts that fell back to TCP because the peer is not
  /// "same host" after all: the kernel refused process_vm_* (EPERM / EACCES /
  /// ENOSYS), or the peer's identity did not check out (other uid, other pid
  /// namespace, pid not visible, other engine instance). Per peer, cached 60 s.
  std::uint64_t same_host_fallbacks = 0;
  /// Unregistrations that happened while a same-host peer still held a grant
  /// on the region (it may copy until the grant's lease ends, see
  /// unregister_memory).
  std::uint64_t revoked_with_grants = 0;
  /// Same-host grants peers hold on our regions right now (until release,
  /// connection close or lease expiry noticed by the control server).
  std::uint64_t same_host_grants_held = 0;
  /// Same-host grants given for a run of ranges under one token at once (a
  /// value's pieces: one request, answer and release for up to 64), ever;
  /// each range also counts in served_*_ops as one operation.
  std::uint64_t same_host_range_grants = 0;
  /// Same-host releases this engine sent in front of its next request on
  /// the connection instead of alone (a spread batch's windows), ever.
  std::uint64_t same_host_releases_deferred = 0;
  /// Live registrations, derived ones (engine::register_within) included.
  std::uint64_t registered_regions = 0;
  /// Derived registrations made (engine::register_within), ever.
  std::uint64_t derived_registrations = 0;
  /// Memory registrations with the RDMA devices (one per region and device:
  /// ibv_reg_mr calls for register_memory), ever. Derived registrations add
  /// none. 0 with protocol "tcp".
  std::uint64_t rdma_memory_registrations = 0;
  /// Same-host shared memory (engine::allocate_shared): peers' memfds this
  /// engine mapped as initiator (ever; one per peer memory, shared by the
  /// runtime threads, unmapped 5 s after its last use), and memfds it
  /// passed to peers as target (ever).
  std::uint64_t shared_mappings = 0;
  std::uint64_t shared_maps_served = 0;
  /// Same-host copies (chunks of <= 1 MiB) made with memcpy through such a
  /// mapping instead of process_vm_readv/writev, as initiator (ever).
  std::uint64_t shared_copies = 0;
  /// engine::fence calls, and the RDMA queue pairs they moved to the error
  /// state (served ones from the peer plus ours to the peer).
  std::uint64_t fences = 0;
  std::uint64_t fenced_queue_pairs = 0;
  /// Calls (engine::call) this engine answered with its handler (served),
  /// refused (no handler, or the handler's error), and made as initiator
  /// (ok / failed).
  std::uint64_t served_calls = 0;
  std::uint64_t served_call_errors = 0;
  std::uint64_t initiated_calls = 0;
  std::uint64_t initiated_call_errors = 0;
  /// Protocol "rdma": one entry per opened device, in device index order.
  std::vector<rdma_device_stats> rdma_devices;
};

/// One request of a batch: moves `length` bytes between `local` and `remote`.
/// `length` may be smaller than `remote.length` (a prefix moves), never larger.
struct request {
  op_kind op = op_kind::read;
  std::byte* local = nullptr;  ///< read: destination; write: source (never modified)
  std::size_t length = 0;
  remote_buffer remote;

  static request make_read(std::span<std::byte> dst, remote_buffer src) {
    return {op_kind::read, dst.data(), dst.size(), std::move(src)};
  }
  static request make_write(std::span<const std::byte> src, remote_buffer dst) {
    return {op_kind::write, const_cast<std::byte*>(src.data()), src.size(), std::move(dst)};
  }
};

/// A top-level registration that contains a range (engine::find_registration):
/// where it starts, its size, its token and the access it grants. A snapshot:
/// the registration may be gone by the time it is used.
struct registration_info {
  std::byte* data = nullptr;
  std::size_t size = 0;
  std::uint64_t token = 0;
  region_access access = region_access::local_only;
};

/// A registration (RAII). Move-only; destruction unregisters (see
/// engine::unregister_memory: it returns at once, never waits for a peer). May outlive
/// its engine (then destruction only drops the bookkeeping). Destroying a
/// region unregisters exactly this registration (and what was derived from
/// it), never a later one that happens to get the same token.
class region {
 public:
  region() = default;
  region(region&& o) noexcept;
  region& operator=(region&& o) noexcept;
  region(const region&) = delete;
  region& operator=(const region&) = delete;
  ~region();

  /// Unregisters now (idempotent).
  void reset() noexcept;
  explicit operator bool() const noexcept { return token_ != 0; }

  std::byte* data() const noexcept { return base_; }
  std::size_t size() const noexcept { return length_; }
  std::uint64_t token() const noexcept { return token_; }
  const std::string& endpoint() const noexcept { return endpoint_; }

  /// Descriptor of [offset, offset + length) for a peer. Throws
  /// std::out_of_range when the range is not inside the region (a caller bug).
  remote_buffer describe(std::uint64_t offset, std::uint64_t length) const;
  /// Descriptor of the whole region.
  remote_buffer describe() const { return describe(0, length_); }

 private:
  friend class engine;
  region(std::shared_ptr<detail::registry> reg, std::uint64_t token, std::uint64_t id, std::byte* base,
         std::size_t length, std::string endpoint) noexcept;

  std::shared_ptr<detail::registry> registry_;
  std::uint64_t token_ = 0;
  std::uint64_t id_ = 0;  // the registry entry's serial
  std::byte* base_ = nullptr;
  std::size_t length_ = 0;
  std::string endpoint_;
  std::shared_ptr<const void> memory_;  // engine::allocate_shared: the memory the handle owns
};

/// Allocates `len` bytes of shared memory (a sealed memfd, zero-filled,
/// page-aligned, mapped MAP_SHARED) for the caller to register later with
/// any engine's register_memory: a registration inside it behaves like
/// engine::allocate_shared's (same-host peers may map the memfd and copy
/// with memcpy). For callers that allocate a pool before they have an
/// engine (Python's MooncakeHostMemAllocator). Thread-safe. Errors:
/// invalid_params (len 0), no_available_handle (memfd / mmap failed).
mc::result<std::span<std::byte>> allocate_shared_memory(std::size_t len);
/// Frees what allocate_shared_memory returned (`addr` = its start). A
/// registration inside it keeps the memory mapped until it ends (and a
/// peer's mapping keeps the memfd alive 5 s after its last use). Thread-safe.
/// Errors: invalid_params (not a live allocation's start).
mc::result<void> free_shared_memory(void* addr);

/// The transfer engine. One per process is typical; several work (each with
/// its own port). Hosted on a runtime: every transfer runs on a runtime thread
/// and the engine keeps per-thread connection pools (no locks on the data
/// path).
///
/// Thread-safety: register/unregister, endpoint(), stats() are thread-safe;
/// read/write/batch may be awaited from any coroutine (on a thread of the
/// engine's runtime they run on that thread, elsewhere they hop to thread 0).
/// Lifetime: the runtime must outlive the engine and be running while the
/// engine starts and stops.
class engine {
 public:
  /// Throws std::invalid_argument on invalid options (protocol "rdma" without
  /// a usable device; slice size or pool bounds out of range).
  explicit engine(mc::runtime::runtime& rt, engine_options opts = {});
  /// Calls stop().
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Binds and listens (TCP, and the same-host control socket). Errors:
  /// io_error (bind/listen failed; the reason is printed on stderr),
  /// invalid_params (bad bind_host, or an advertised host mc::endpoint
  /// does not accept), unavailable_in_current_status (started
  /// twice or after stop). Call from any non-runtime thread.
  mc::result<void> start();

  /// Stops serving and initiating: closes the listeners and every connection,
  /// so transfers in flight fail promptly (transfer_fail / shutting_down),
  /// then waits until every engine coroutine has finished. Blocking: call it
  /// from a non-runtime thread (throws std::logic_error on a runtime thread;
  /// use `co_await shutdown()` there). Idempotent.
  void stop();
  /// The same as a coroutine, for runtime threads.
  mc::task<void> shutdown();

  /// "host:port" peers use to reach this engine (valid after start()).
  std::string endpoint() const;
  const engine_options& options() const noexcept;

  /// Registers [addr, addr + len) with the access peers get (`access`; use
  /// the least the region needs: local_only for buffers only this process
  /// initiates on, remote_read for a source a peer pulls from, remote_write
  /// for a destination a peer pushes into) and returns its RAII handle with a
  /// fresh random 64-bit token. With protocol "rdma" the MR gets the matching
  /// verbs access flags. Thread-safe, O(1) lookups afterwards. Regions may
  /// overlap (each has its own token). Errors: invalid_params (null / empty /
  /// address overflow), shutting_down; with "rdma" buffer_overflow / io_error
  /// from ibv_reg_mr. `derivable` false: a registration that serves one
  /// request; register_within(addr, ...) and find_registration never pick
  /// it as the parent (its revocation at that request's end would revoke
  /// another request's derived token over the same memory too).
  mc::result<region> register_memory(void* addr, std::size_t len,
                                     region_access access = region_access::remote_read_write, bool derivable = true);

  /// Allocates `len` bytes of shared memory (a memfd mapped MAP_SHARED,
  /// zero-filled, page-aligned) and registers them like register_memory.
  /// The difference is for same-host peers: a peer granted a range of it
  /// (or of a registration derived from it) may map the whole memfd once
  /// (passed over the control socket) and then copy with memcpy instead of
  /// process_vm_readv/writev - no page pinning per copy (lib/transfer/README.md
  /// "Shared-memory registrations").
  /// Grants, leases and token checks are unchanged: a well-behaved peer
  /// touches only granted ranges while their lease lasts. The memory
  /// belongs to the handle: it stays mapped here until the handle is reset
  /// or destroyed (and after that only while a grant or a peer's mapping
  /// holds the memfd; a peer drops its mapping 5 s after its last use).
  /// Thread-safe. Errors: invalid_params (len 0,
  /// bad access), no_available_handle (memfd_create, ftruncate or mmap
  /// failed), shutting_down; with "rdma" those of register_memory.
  mc::result<region> allocate_shared(std::size_t len, region_access access = region_access::remote_read_write);

  /// Derived registration (a "child"): registers [parent.data() + offset,
  /// + length) inside the live registration `parent` of this engine with a
  /// fresh token of its own and `access` (at most what the parent grants).
  /// Cheap: a hash insert, no system call, and on RDMA no ibv_reg_mr - the
  /// child uses the parent's MR; its token keeps the parent's rkey in the
  /// low 32 bits and has bit 63 set (the "derived" mark). Every target path
  /// checks the child's token, range and access exactly as for any region:
  /// TCP, same-host and in-process refuse a revoked child's requests with
  /// access_denied; RDMA initiators validate a derived token with the target
  /// (rdma_check over the QP's control connection) before its first use on
  /// each queue pair, since the NIC only checks the parent's rkey (see
  /// fence() and README "Late writes after a timeout"). The child is revoked
  /// by its own handle, by unregister_memory(child token), and together with
  /// its parent (unregistering a parent revokes everything derived from it;
  /// the child handles then only drop their bookkeeping). Children may have
  /// children. Thread-safe. Errors: invalid_params (`parent` empty or of
  /// another engine, empty range, range not inside the parent, `access` the
  /// parent does not grant), out_of_range (the parent was unregistered),
  /// shutting_down.
  mc::result<region> register_within(const region& parent, std::uint64_t offset, std::uint64_t length,
                                     region_access access);
  /// The same for [addr, addr + len) inside whichever top-level registration
  /// of this engine contains it and grants `access` (find_registration), in
  /// one step (no race with the parent's unregistration). Errors:
  /// out_of_range (no registration contains the range with that access: the
  /// caller registers or stages instead), invalid_params (null / empty /
  /// overflowing range, bad access), shutting_down.
  mc::result<region> register_within(const void* addr, std::size_t len, region_access access);
  /// A scatter registration: ONE derived registration (one token, one
  /// registry entry) of all of `pieces`, which must lie inside the same
  /// top-level registration of this engine granting `access` (the one
  /// find_registration gives for the first piece). Peers may touch bytes
  /// inside any one piece and nothing between them: a request across a gap
  /// or into one is refused with access_denied, exactly like a range outside
  /// a region. The region's data() / size() are the span from the lowest
  /// piece to the end of the highest; describe(p.data() - data(), p.size())
  /// names piece p (describe does not know the gaps: a descriptor of a gap
  /// is refused by this engine when used). Pieces may come in any order and
  /// overlap. Revoked as a whole (its handle, unregister_memory(token), its
  /// parent's unregistration). For a request whose value is gathered from /
  /// scattered into many pieces: one lock and one entry instead of one per
  /// piece. Thread-safe. Errors: invalid_params (no pieces, more than 4096,
  /// a null, empty or overflowing piece, bad access), out_of_range (no
  /// registration holds the first piece with that access, or a piece lies
  /// outside the one that does), shutting_down.
  mc::result<region> register_pieces_within(std::span<const std::span<std::byte>> pieces, region_access access);

  /// The top-level registration (register_memory, not derived) that contains
  /// [addr, addr + len) and grants `need`: among regions starting at or
  /// below `addr`, the one with the highest start, looking at the 16 nearest
  /// (overlapping registrations beyond that are not found). nullopt when
  /// none. Thread-safe, O(log n), no system call.
  std::optional<registration_info> find_registration(const void* addr, std::size_t len,
                                                     region_access need = region_access::local_only) const;

  /// Late-write fence towards one peer (its engine endpoint, "host:port").
  /// After it completes, no RDMA READ/WRITE that `peer_endpoint` initiated
  /// through a queue pair that existed when fence() was called can touch
  /// this engine's memory any more: every served (inbound) QP whose
  /// initiator announced that endpoint (and every served QP of a peer that
  /// announced none) is moved to the error state and its control
  /// connection shut down (the peer's transfers on it fail with
  /// transfer_fail, never retried; its next transfer handshakes a new QP),
  /// and every QP of ours to that peer is moved to the error state and
  /// dropped (our own transfers on them are retried on fresh QPs). Combined
  /// with revoking the registration first, a late WRITE/READ into a derived
  /// registration is impossible on RDMA too: a new QP validates derived
  /// tokens before using them (see register_within). TCP, same-host and
  /// in-process need no fence (the target checks every request's token), so
  /// with protocol "tcp" it only counts. Cost: every other transfer the peer
  /// is running into this engine on those QPs fails too (transfer_fail), so
  /// fence only when giving up on a transfer (timeout, cancel), not per
  /// request. Never waits for the peer; hops once to each runtime thread
  /// (outbound QPs). Thread-safe. Errors: invalid_params (empty endpoint),
  /// shutting_down.
  mc::task<mc::result<void>> fence(std::string peer_endpoint);

  /// Unregisters by token. Returns at once (never waits for a peer or the
  /// network; at most for one <= 1 MiB copy chunk of this process on another
  /// thread). When it returns: no new transfer and no new same-host grant can
  /// touch the region, and no byte is being moved into or out of it by this
  /// process's transfers or served TCP requests (a slice in progress on
  /// another thread fails at its next system call). Residual: a same-host
  /// peer that was granted access before may still copy until that grant's
  /// lease ends (<= 1 s, and never after the peer's transfer deadline); a
  /// well-behaved peer checks the lease before every <= 1 MiB chunk. Such
  /// revocations are counted in engine_stats::revoked_with_grants. In-flight
  /// transfers that target the region fail (the initiator sees access_denied
  /// or transfer_fail); bytes already moved stay. Every registration derived
  /// from it (register_within) is revoked with it. On RDMA a top-level
  /// region's MR is deregistered; a derived one has none (see fence() for
  /// its late-write guarantee). Errors: out_of_range (unknown token).
  mc::result<void> unregister_memory(std::uint64_t token);

  /// Random nonzero 64-bit id of this engine, drawn at construction. The
  /// control plane publishes it with the engine's endpoint so that peers can
  /// check (remote_buffer::instance) that the same-host socket they found
  /// belongs to this engine.
  std::uint64_t instance_id() const noexcept;

  /// Reads `local.size()` bytes from `src` (remote -> local). Completes when
  /// every byte has arrived. `local.size()` must be <= src.length (else
  /// invalid_params); 0 bytes completes at once. Errors: access_denied (token
  /// mismatch, range not inside the token's region, region unregistered, or
  /// access not granted: one code for every "not yours"), timeout, cancelled, transfer_fail (peer
  /// unreachable, died, reset, protocol error), shutting_down, unsupported
  /// (forced transport unavailable). On error the content of `local` is
  /// unspecified. `local` must stay valid until the task completes.
  mc::task<mc::result<void>> read(std::span<std::byte> local, remote_buffer src,
                                  std::chrono::steady_clock::duration timeout);
  mc::task<mc::result<void>> read(std::span<std::byte> local, remote_buffer src);

  /// Writes `local` into `dst` (local -> remote). Completes only when the
  /// target has acknowledged that every byte is in its memory (an immediate
  /// read-back sees them). Errors as read(); on error the target range may
  /// hold any mix of old and new bytes.
  mc::task<mc::result<void>> write(std::span<const std::byte> local, remote_buffer dst,
                                   std::chrono::steady_clock::duration timeout);
  mc::task<mc::result<void>> write(std::span<const std::byte> local, remote_buffer dst);

  /// Runs every request concurrently (grouped by peer, sliced, spread over
  /// pooled connections) under one deadline; one result per request, in
  /// input order. Buffers must stay valid until the task completes.
  mc::task<std::vector<mc::result<void>>> batch(std::vector<request> requests,
                                                std::chrono::steady_clock::duration timeout);
  mc::task<std::vector<mc::result<void>>> batch(std::vector<request> requests);

  /// Installs the handler of calls from peers (replacing any before; an
  /// empty function removes it: calls are then refused with unsupported).
  /// Thread-safe; calls that started keep the handler they found.
  void set_call_handler(call_handler h);

  /// A request/answer exchange with the peer engine at `peer_endpoint` over
  /// one pooled TCP connection (whatever the transport of transfers): sends
  /// `request` (1 byte..2 MiB), receives the reply (at most reply.size()
  /// bytes, 1 byte..2 MiB) into `reply` and returns its length. One round
  /// trip; the layer above's small messages (the store's small-value reads).
  /// Errors: invalid_params (sizes out of range, bad endpoint), unsupported
  /// (the peer has no handler, or predates calls: it closes the connection),
  /// the handler's own error code, timeout, cancelled, transfer_fail (peer
  /// unreachable, reset, protocol error), shutting_down,
  /// unavailable_in_current_status (not started). On error `reply` holds
  /// unspecified bytes. `request` and `reply` must stay valid until the task
  /// completes. Thread-safe (runs on the calling runtime thread, or on thread
  /// 0 when called from elsewhere).
  mc::task<mc::result<std::size_t>> call(std::string peer_endpoint, std::span<const std::byte> request,
                                         std::span<std::byte> reply, std::chrono::steady_clock::duration timeout);

  /// Counters for /metrics.
  engine_stats stats() const;

 private:
  std::shared_ptr<detail::engine_impl> impl_;
};

}  // namespace mc::transfer
