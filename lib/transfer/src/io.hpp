#pragma once
// Reactive socket I/O on native handles: try the non-blocking system call,
// await readiness on EAGAIN. Region memory is only ever moved by our own
// system calls (no kernel or Asio operation holds a pointer into it between
// them), so a cancelled transfer or a revoked region can never be written
// after the fact, and no composed asio operation splits large buffers
// (DESIGN.md §3). The one Asio receive operation used (recv_and_wait) gets
// only buffers its caller owns until that operation has completed.
#include "peer_memory.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "registry.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>

namespace mc::transfer::detail {

template <class Socket>
task<result<void>> wait_ready(Socket& s, typename Socket::wait_type w) {
  auto [ec] = co_await s.async_wait(w, boost::asio::as_tuple(boost::asio::use_awaitable));
  if (ec) co_return fail(ec == boost::asio::error::operation_aborted ? errc::cancelled : errc::transfer_fail);
  co_return result<void>{};
}

inline errc errno_to_errc(int e) noexcept {
  return e == EBADF ? errc::cancelled : errc::transfer_fail;  // EBADF: closed under us (stop)
}

/// Moves iov/cnt past `n` bytes that were transferred (whole entries are
/// dropped, a partly transferred one is shortened); n <= the bytes left.
inline void advance_iov(iovec*& iov, int& cnt, std::size_t n) noexcept {
  while (cnt > 0 && n >= iov->iov_len) {
    n -= iov->iov_len;
    ++iov;
    --cnt;
  }
  if (cnt > 0) {
    iov->iov_base = static_cast<char*>(iov->iov_base) + n;
    iov->iov_len -= n;
  }
}

/// Sends every byte described by iov[0..cnt) (the array is consumed).
template <class Socket>
task<result<void>> send_all(Socket& s, iovec* iov, int cnt) {
  while (cnt > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(cnt);
    ssize_t n = ::sendmsg(s.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) co_return fail(errno_to_errc(errno));
      auto r = co_await wait_ready(s, Socket::wait_write);
      if (!r) co_return r;
      continue;
    }
    advance_iov(iov, cnt, static_cast<std::size_t>(n));
  }
  co_return result<void>{};
}

template <class Socket>
task<result<void>> send_all(Socket& s, const void* p, std::size_t n) {
  iovec iov{const_cast<void*>(p), n};
  co_return co_await send_all(s, &iov, 1);
}

/// One non-blocking recv; >0 bytes, 0 = would block, <0 = error code.
inline ssize_t recv_once(int fd, void* p, std::size_t n, errc& err) noexcept {
  for (;;) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) return r;
    if (r == 0) {  // orderly shutdown by the peer
      err = errc::transfer_fail;
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    err = errno_to_errc(errno);
    return -1;
  }
}

/// Receives at least one byte into the ranges of `bufs` (a buffer sequence),
/// waiting for them when none has arrived: Asio's receive operation, which
/// tries the receive at once and otherwise waits for readability. Returns
/// the bytes received; cancelled (the operation was cancelled: stop, a
/// deadline), transfer_fail (the peer closed, or an I/O error).
///
/// Why not wait_ready() + a receive: on the epoll reactor (Boost < 1.83) a
/// readiness wait re-arms the descriptor with epoll_ctl on every wait, and a
/// descriptor that ever waited to write (every connected socket: the connect
/// itself) then reports EPOLLOUT at once, a wake-up for nothing; a receive
/// operation only queues itself. Two system calls and one wake-up fewer per
/// small exchange. The ranges are written by that operation only until it
/// completes, and the coroutine resumes only then (also when cancelled), so
/// only buffers the caller owns for that long are passed: a connection's
/// own input buffer, a call's answer buffer (never region memory: region
/// bytes are moved by our own system calls under their access locks).
template <class Socket, class Buffers>
task<result<std::size_t>> recv_and_wait(Socket& s, const Buffers& bufs) {
  auto [ec, n] = co_await s.async_receive(bufs, boost::asio::as_tuple(boost::asio::use_awaitable));
  if (ec) co_return fail(ec == boost::asio::error::operation_aborted ? errc::cancelled : errc::transfer_fail);
  if (n == 0) co_return fail(errc::transfer_fail);  // empty ranges are the caller's bug; never wait on them
  co_return n;
}

template <class Socket>
task<result<std::size_t>> recv_and_wait(Socket& s, void* p, std::size_t n) {
  co_return co_await recv_and_wait(s, boost::asio::mutable_buffer(p, n));
}

/// While a large payload is outstanding, ask the kernel to report readability
/// only once a useful amount has arrived (fewer wake-ups per MiB); restored to
/// 1 when the payload is complete.
class rcvlowat {
 public:
  explicit rcvlowat(int fd) : fd_(fd) {}
  ~rcvlowat() {
    if (cur_ > 1) set(1);
  }
  void before_wait(std::uint64_t remaining) noexcept {
    int want = remaining >= (64u << 10) ? static_cast<int>(std::min<std::uint64_t>(remaining, 256u << 10)) : 1;
    if (want != cur_) set(want);
  }

 private:
  void set(int v) noexcept {
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v);
    cur_ = v;
  }
  int fd_;
  int cur_ = 1;
};

/// Receives exactly n bytes into p.
template <class Socket>
task<result<void>> recv_all(Socket& s, void* p, std::size_t n) {
  auto* b = static_cast<std::byte*>(p);
  rcvlowat lowat(s.native_handle());
  while (n > 0) {
    errc err{};
    ssize_t r = recv_once(s.native_handle(), b, n, err);
    if (r < 0) co_return fail(err);
    if (r == 0) {
      lowat.before_wait(n);
      auto w = co_await wait_ready(s, Socket::wait_read);
      if (!w) co_return w;
      continue;
    }
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  co_return result<void>{};
}

/// Receives exactly the bytes described by iov[0..cnt) (at most
/// max_recv_iov entries; the array is consumed) and, in the same system
/// calls, up to `tail_len` bytes that follow them into `tail` (e.g. the start
/// of the next message's header); `*tail_got` is set to the bytes of `tail`
/// received.
inline constexpr int max_recv_iov = 128;
template <class Socket>
task<result<void>> recv_all_v_and_tail(Socket& s, iovec* iov, int cnt, void* tail, std::size_t tail_len,
                                       std::size_t* tail_got) {
  *tail_got = 0;
  if (cnt < 1 || cnt > max_recv_iov) co_return fail(errc::invalid_params);
  std::size_t n = 0;
  for (int i = 0; i < cnt; ++i) n += iov[i].iov_len;
  rcvlowat lowat(s.native_handle());
  std::array<iovec, max_recv_iov + 1> v;
  while (n > 0) {
    std::copy(iov, iov + cnt, v.begin());
    v[static_cast<std::size_t>(cnt)] = {tail, tail_len};
    msghdr msg{};
    msg.msg_iov = v.data();
    msg.msg_iovlen = static_cast<std::size_t>(cnt) + (tail_len > 0 ? 1 : 0);
    ssize_t r = ::recvmsg(s.native_handle(), &msg, MSG_DONTWAIT);
    if (r == 0) co_return fail(errc::transfer_fail);  // orderly shutdown by the peer
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) co_return fail(errno_to_errc(errno));
      lowat.before_wait(n);
      auto w = co_await wait_ready(s, Socket::wait_read);
      if (!w) co_return w;
      continue;
    }
    const auto got = static_cast<std::size_t>(r);
    if (got > n) *tail_got = got - n;
    const auto left = std::min(got, n);
    n -= left;
    advance_iov(iov, cnt, left);
  }
  co_return result<void>{};
}

/// Receives exactly n bytes into p and, in the same system calls, up to
/// `tail_len` bytes that follow them into `tail` (recv_all_v_and_tail with
/// one range).
template <class Socket>
task<result<void>> recv_all_and_tail(Socket& s, void* p, std::size_t n, void* tail, std::size_t tail_len,
                                     std::size_t* tail_got) {
  *tail_got = 0;
  if (n == 0) co_return result<void>{};
  iovec one{p, n};
  co_return co_await recv_all_v_and_tail(s, &one, 1, tail, tail_len, tail_got);
}

/// Reads and discards n bytes (payload of a rejected write).
template <class Socket>
task<result<void>> discard(Socket& s, std::uint64_t n) {
  std::byte scratch[16384];
  while (n > 0) {
    auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof scratch));
    auto r = co_await recv_all(s, scratch, chunk);
    if (!r) co_return r;
    n -= chunk;
  }
  co_return result<void>{};
}

/// Outcome of moving bytes against a registered region on the target side.
enum class region_io { ok, revoked, failed };

}  // namespace mc::transfer::detail
