#pragma once
// Internals of the same-host transport shared by its initiator
// (shm_transport.cpp) and its target (shm_server.cpp). Not a public header.
#include "engine_impl.hpp"
#include "io.hpp"
#include "wire.hpp"

#include <boost/asio/local/stream_protocol.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <string>

namespace mc::transfer::detail::shm {

namespace asio = boost::asio;
using local_ep = asio::local::stream_protocol::endpoint;
using lease = conn_lease<unix_socket>;
inline constexpr auto no_socket_ttl = std::chrono::seconds(30);
inline constexpr auto refused_ttl = std::chrono::seconds(60);
/// Live grants a target holds per control connection at most (the
/// initiator's window); told in the hello answer's token. Targets that do
/// not tell it (older versions) hold legacy_grants_per_conn.
inline constexpr std::size_t max_grants_per_conn = 256;
inline constexpr std::size_t legacy_grants_per_conn = 64;
/// Ranges one grant_ranges request names at most (a 64-piece KV value's
/// pieces under one token: one grant, one answer, one release).
inline constexpr std::size_t max_ranges_per_grant = 64;
/// The hello answer's token: the bound in its low 32 bits, capabilities
/// above (older initiators clamp the whole token to their window).
inline constexpr unsigned hello_caps_shift = 32;
inline constexpr std::uint64_t cap_grant_ranges = 1;

inline local_ep abstract_endpoint(const std::string& name) { return local_ep(std::string(1, '\0') + name); }

/// The other end's credentials as the kernel reports them, translated into
/// our namespaces (pid 0: the process is not visible in our pid namespace).
inline std::optional<ucred> peer_cred_of(unix_socket& s) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred)
    return std::nullopt;
  return cred;
}

inline void put_u64(std::byte* p, std::uint64_t v) noexcept { wire_le::store<std::uint64_t>(p, v); }
inline std::uint64_t get_u64(const std::byte* p) noexcept { return wire_le::load<std::uint64_t>(p); }

/// `tp` (steady_clock = CLOCK_MONOTONIC on Linux, made explicit) in ns.
inline std::uint64_t to_monotonic_ns(std::chrono::steady_clock::time_point tp) noexcept {
  const auto now = std::chrono::steady_clock::now();
  const auto mono = monotonic_ns();
  if (tp <= now) return mono;
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(tp - now).count();
  return static_cast<std::uint64_t>(left) > ~mono ? ~0ull : mono + static_cast<std::uint64_t>(left);
}

inline task<result<void>> send_header(unix_socket& s, const header& h) {
  header_bytes hb;
  encode(h, hb);
  co_return co_await send_all(s, hb.data(), hb.size());
}

inline task<result<header>> recv_header(unix_socket& s) {
  header_bytes hb;
  auto r = co_await recv_all(s, hb.data(), hb.size());
  if (!r) co_return r.error();
  co_return decode(hb);
}

/// A file descriptor owned by one scope.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  int get() const noexcept { return fd_; }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

/// Sends `h` with `fd` attached to its first byte (SCM_RIGHTS).
inline task<result<void>> send_header_fd(unix_socket& s, const header& h, int fd) {
  header_bytes hb;
  encode(h, hb);
  for (;;) {
    iovec iov{hb.data(), hb.size()};
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> cbuf{};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf.data();
    m.msg_controllen = cbuf.size();
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    const ssize_t r = ::sendmsg(s.native_handle(), &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      if (static_cast<std::size_t>(r) == hb.size()) co_return result<void>{};
      co_return co_await send_all(s, hb.data() + r, hb.size() - static_cast<std::size_t>(r));
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (auto w = co_await wait_ready(s, unix_socket::wait_write); !w) co_return w;
      continue;
    }
    co_return fail(errc::transfer_fail);
  }
}

/// Receives one header and the descriptors that ride on its bytes: the
/// first one goes to `fd` (closed and replaced if one was there), any
/// further ones are closed. A header without a descriptor leaves `fd` empty.
inline task<result<header>> recv_header_fd(unix_socket& s, unique_fd& fd) {
  header_bytes hb;
  std::size_t got = 0;
  fd.reset();
  while (got < hb.size()) {
    iovec iov{hb.data() + got, hb.size() - got};
    alignas(cmsghdr) std::array<char, CMSG_SPACE(4 * sizeof(int))> cbuf{};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf.data();
    m.msg_controllen = cbuf.size();
    const ssize_t r = ::recvmsg(s.native_handle(), &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r > 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < n; ++i) {
          int one = -1;
          std::memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof one);
          if (fd.get() < 0)
            fd.reset(one);
          else
            ::close(one);
        }
      }
      got += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) co_return fail(errc::transfer_fail);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (auto w = co_await wait_ready(s, unix_socket::wait_read); !w) co_return w.error();
      continue;
    }
    co_return fail(errc::transfer_fail);
  }
  co_return decode(hb);
}

/// A grant request: its header, then the requested lease end (the item's
/// deadline), for the part of `it` from `done` on (shm_grants.cpp). Returns
/// the bytes written: grant_request_size.
inline constexpr std::size_t grant_request_size = header_size + 8;
std::size_t encode_grant(std::byte* out, std::uint64_t id, const transfer_item& it, std::uint64_t done);

/// One grant_ranges request for `run` (2..max_ranges_per_grant items of one
/// direction under one token; the peer told it serves them): the header
/// names the first item's range, then the requested lease (the earliest
/// deadline of the run), the count and the other ranges (shm_grants.cpp).
/// Returns the bytes written: header_size + 16 * run.size(), less than the
/// run's single requests (grant_request_size each).
std::size_t encode_grant_ranges(std::byte* out, std::uint64_t id, std::span<transfer_item* const> run);

/// Whether a grant answer names a mapping of the peer's shared memory
/// (address = its start there, length = its id; either 0: none).
inline bool names_mapping(const header& grant) noexcept { return grant.length != 0 && grant.address != 0; }

/// The mapping of the peer's shared memory a grant answer names (address
/// = its start there, length = its id; 0: none): from this thread's cache,
/// from another thread's (one mapping per process), or fetched now over
/// `c` (shm_mapping.cpp). Null: copy with process_vm_*. An error: the
/// connection is unusable. Runs on `ts`'s runtime thread.
task<result<std::shared_ptr<peer_mapping>>> mapping_for(engine_impl& eng, thread_state& ts, pooled_conn<unix_socket>& c,
                                                        const header& grant);

/// One chunk of `n` bytes through a mapping of the peer's shared memory
/// (`peer` inside `m`), in `op`'s direction (shm_copy.cpp).
void copy_mapped(engine_impl& eng, const peer_mapping& m, op_kind op, std::byte* local, std::byte* peer, std::size_t n);

/// How copy_item ended.
enum class copy_end { complete, lease_over, refused, failed, cancelled };

/// Copies [done, length) of `it` to / from process `pid` in chunks of at
/// most max_copy_chunk while the lease (CLOCK_MONOTONIC ns) lasts, yielding
/// to the runtime between chunks; `done` advances with every chunk. With
/// `m` (the peer's shared memory holding the range, mapped here) the chunks
/// are memcpy through the mapping instead. refused: the kernel refuses
/// cross-memory attach (EPERM, EACCES, ENOSYS); failed: the peer is gone or
/// the range faults; cancelled: while yielding (shm_copy.cpp).
task<copy_end> copy_item(engine_impl& eng, pid_t pid, const transfer_item& it, std::uint64_t& done,
                         std::uint64_t lease_end_ns, const peer_mapping* m);

}  // namespace mc::transfer::detail::shm
