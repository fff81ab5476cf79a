#include "asio_stream.hpp"
#include "mc/rpc/detail/bridge.hpp"

#include <boost/asio/socket_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <kj/debug.h>

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

namespace mc::rpc::detail {

namespace asio = boost::asio;

/// Shared with pending asio handlers (which outlive the stream).
struct asio_stream::core {
  explicit core(asio::ip::tcp::socket s) : sock(std::move(s)), flush_timer(sock.get_executor()) {}
  asio::ip::tcp::socket sock;
  kj::Own<kj::PromiseFulfiller<void>> read_waiter;  // null when none
  kj::Own<kj::PromiseFulfiller<void>> write_waiter;
  bool read_wait_pending = false;
  bool write_wait_pending = false;
  bool closed = false;   // stream destroyed: handlers touch nothing KJ
  bool writing = false;  // a write is waiting for the socket to drain
  // Deferred Finish messages (see asio_stream.hpp); the flush timer is armed.
  std::vector<kj::byte> deferred;
  asio::steady_timer flush_timer;
  bool flush_armed = false;

  /// Sends what is deferred, as far as the socket takes it now (the rest
  /// stays, a later write or flush sends it). A failure drops it: the
  /// connection is broken and its reads report that.
  void flush_deferred() noexcept {
    while (!deferred.empty()) {
      ssize_t n = ::send(sock.native_handle(), deferred.data(), deferred.size(), MSG_NOSIGNAL);
      if (n > 0) {
        deferred.erase(deferred.begin(), deferred.begin() + n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      deferred.clear();
      return;
    }
  }

  /// Sends the deferred Finish messages `finish_delay` from now unless a
  /// write takes them first; while a write waits for the socket, later.
  static void arm_flush(const std::shared_ptr<core>& c) {
    if (c->flush_armed) return;
    c->flush_armed = true;
    c->flush_timer.expires_after(finish_delay);
    c->flush_timer.async_wait([c](boost::system::error_code) {
      c->flush_armed = false;
      if (c->closed || c->deferred.empty()) return;
      if (c->writing)
        arm_flush(c);
      else
        c->flush_deferred();
    });
  }
};

bool is_rpc_finish(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) noexcept {
  // One segment: an 8-byte table (segment count - 1 = 0, the segment's words),
  // then the segment. Finish messages are 4 words; accept up to 16.
  if (pieces.size() != 2 || pieces[0].size() != 8) return false;
  std::uint32_t table[2];
  std::memcpy(table, pieces[0].begin(), 8);
  const auto words = static_cast<std::size_t>(table[1]);
  if (table[0] != 0 || words < 2 || words > 16 || pieces[1].size() != words * 8) return false;
  std::uint64_t root;
  std::memcpy(&root, pieces[1].begin(), 8);
  if ((root & 3) != 0) return false;  // not a struct pointer
  const auto offset = static_cast<std::int32_t>(static_cast<std::uint32_t>(root)) >> 2;
  const auto data_words = static_cast<std::uint16_t>(root >> 32);
  const auto start = 1 + static_cast<std::int64_t>(offset);
  if (data_words < 1 || start < 1 || start + 1 > static_cast<std::int64_t>(words)) return false;
  std::uint16_t which;  // rpc.capnp Message: the union's discriminant is data bits 0-15
  std::memcpy(&which, pieces[1].begin() + start * 8, 2);
  constexpr std::uint16_t finish = 4;
  return which == finish;
}

namespace {

kj::Exception socket_error(const char* what, int err) {
  auto type = (err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED || err == ETIMEDOUT ||
               err == EHOSTUNREACH)
                  ? kj::Exception::Type::DISCONNECTED
                  : kj::Exception::Type::FAILED;
  return kj::Exception(type, __FILE__, __LINE__, kj::str(what, ": ", strerror(err)));
}

void complete_waiter(kj::Own<kj::PromiseFulfiller<void>>& w, const boost::system::error_code& ec) {
  auto f = kj::mv(w);
  if (!f || !f->isWaiting()) return;
  if (ec && ec != asio::error::operation_aborted)
    f->reject(kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                            kj::str("socket wait failed: ", ec.message().c_str())));
  else
    f->fulfill();  // retry the non-blocking operation; it reports the real state
}

}  // namespace

asio_stream::asio_stream(asio::ip::tcp::socket sock)
    : core_(std::make_shared<core>(std::move(sock))), last_activity_(std::chrono::steady_clock::now()) {
  boost::system::error_code ec;
  core_->sock.non_blocking(true, ec);
  core_->sock.set_option(asio::ip::tcp::no_delay(true), ec);
}

asio_stream::~asio_stream() noexcept(false) {
  core_->closed = true;
  core_->read_waiter = nullptr;
  core_->write_waiter = nullptr;
  boost::system::error_code ec;
  core_->flush_timer.cancel();
  core_->sock.close(ec);  // pending waits complete (posted) with operation_aborted
}

kj::Promise<void> asio_stream::wait_readable() {
  auto paf = kj::newPromiseAndFulfiller<void>();
  core_->read_waiter = kj::mv(paf.fulfiller);
  if (!core_->read_wait_pending) {
    core_->read_wait_pending = true;
    core_->sock.async_wait(asio::socket_base::wait_read, [c = core_](boost::system::error_code ec) {
      c->read_wait_pending = false;
      if (c->closed) return;
      kj_turn_here here;  // capnp takes the bytes in this handler, not a posted run
      complete_waiter(c->read_waiter, ec);
      here.run();
    });
  }
  return kj::mv(paf.promise);
}

kj::Promise<void> asio_stream::wait_writable() {
  auto paf = kj::newPromiseAndFulfiller<void>();
  core_->write_waiter = kj::mv(paf.fulfiller);
  if (!core_->write_wait_pending) {
    core_->write_wait_pending = true;
    core_->sock.async_wait(asio::socket_base::wait_write, [c = core_](boost::system::error_code ec) {
      c->write_wait_pending = false;
      if (c->closed) return;
      kj_turn_here here;  // capnp takes the bytes in this handler, not a posted run
      complete_waiter(c->write_waiter, ec);
      here.run();
    });
  }
  return kj::mv(paf.promise);
}

kj::Promise<size_t> asio_stream::tryRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  return read_loop(static_cast<kj::byte*>(buffer), min_bytes, max_bytes, 0);
}

kj::Promise<size_t> asio_stream::read_loop(kj::byte* buf, size_t min_bytes, size_t max_bytes, size_t done) {
  int fd = core_->sock.native_handle();
  for (;;) {
    // Serve from the read-ahead buffer first.
    if (rpos_ < rend_) {
      size_t n = std::min(rend_ - rpos_, max_bytes - done);
      // capnp reads a zero-length segment with a null buffer: memcpy(nullptr,
      // ..., 0) is undefined (found by the master_rpc fuzz target, UBSan).
      if (n > 0) std::memcpy(buf + done, rbuf_.get() + rpos_, n);
      rpos_ += n;
      done += n;
    }
    if (done >= min_bytes) return done;
    rpos_ = rend_ = 0;
    if (drained_) {
      drained_ = false;
      return wait_readable().then(
          [this, buf, min_bytes, max_bytes, done]() { return read_loop(buf, min_bytes, max_bytes, done); });
    }
    size_t want = max_bytes - done;
    ssize_t n;
    if (want >= read_ahead_bytes) {
      n = ::recv(fd, buf + done, want, 0);  // large read: straight into the caller's buffer
      if (n > 0) done += static_cast<size_t>(n);
      drained_ = n > 0 && static_cast<size_t>(n) < want;
    } else {
      n = ::recv(fd, rbuf_.get(), read_ahead_bytes, 0);  // small read: fetch what is there
      if (n > 0) rend_ = static_cast<size_t>(n);
      drained_ = n > 0 && static_cast<size_t>(n) < read_ahead_bytes;
    }
    if (n > 0) {
      last_activity_ = std::chrono::steady_clock::now();
      continue;
    }
    if (n == 0) return done;  // EOF
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return wait_readable().then(
          [this, buf, min_bytes, max_bytes, done]() { return read_loop(buf, min_bytes, max_bytes, done); });
    }
    return socket_error("recv", errno);
  }
}

kj::Promise<void> asio_stream::write(const void* buffer, size_t size) {
  if (core_->deferred.empty()) return write_loop(static_cast<const kj::byte*>(buffer), size);
  auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>(1);
  pieces[0] = kj::arrayPtr(static_cast<const kj::byte*>(buffer), size);
  return write_after_deferred(kj::mv(pieces));
}

kj::Promise<void> asio_stream::write_after_deferred(kj::Array<kj::ArrayPtr<const kj::byte>> pieces) {
  auto held = kj::heapArray<kj::byte>(core_->deferred.size());
  std::memcpy(held.begin(), core_->deferred.data(), held.size());
  core_->deferred.clear();
  auto all = kj::heapArray<kj::ArrayPtr<const kj::byte>>(pieces.size() + 1);
  all[0] = kj::arrayPtr(static_cast<const kj::byte*>(held.begin()), held.size());
  for (size_t i = 0; i < pieces.size(); ++i) all[i + 1] = pieces[i];
  return writev_loop(kj::mv(all), 0).attach(kj::mv(held));
}

void asio_stream::arm_deferred_flush() { core::arm_flush(core_); }

kj::Promise<void> asio_stream::write_loop(const kj::byte* buf, size_t size) {
  int fd = core_->sock.native_handle();
  while (size > 0) {
    ssize_t n = ::send(fd, buf, size, MSG_NOSIGNAL);
    if (n >= 0) {
      buf += n;
      size -= static_cast<size_t>(n);
      last_activity_ = std::chrono::steady_clock::now();
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      core_->writing = true;
      return wait_writable().then([this, buf, size]() { return write_loop(buf, size); });
    }
    core_->writing = false;
    return socket_error("send", errno);
  }
  core_->writing = false;
  return kj::READY_NOW;
}

kj::Promise<void> asio_stream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  if (!core_->writing && is_rpc_finish(pieces) &&
      core_->deferred.size() + pieces[0].size() + pieces[1].size() <= max_deferred_bytes) {
    for (auto& p : pieces) core_->deferred.insert(core_->deferred.end(), p.begin(), p.end());
    arm_deferred_flush();
    return kj::READY_NOW;
  }
  // The pieces array itself may not outlive this call; the bytes do.
  auto copy = kj::heapArray<kj::ArrayPtr<const kj::byte>>(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) copy[i] = pieces[i];
  if (!core_->deferred.empty()) return write_after_deferred(kj::mv(copy));
  return writev_loop(kj::mv(copy), 0);
}

kj::Promise<void> asio_stream::writev_loop(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, size_t first) {
  int fd = core_->sock.native_handle();
  constexpr size_t max_iov = 64;
  for (;;) {
    while (first < pieces.size() && pieces[first].size() == 0) ++first;
    if (first == pieces.size()) {
      core_->writing = false;
      return kj::READY_NOW;
    }
    iovec iov[max_iov];
    size_t cnt = 0;
    for (size_t i = first; i < pieces.size() && cnt < max_iov; ++i) {
      if (pieces[i].size() == 0) continue;
      iov[cnt].iov_base = const_cast<kj::byte*>(pieces[i].begin());
      iov[cnt].iov_len = pieces[i].size();
      ++cnt;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = cnt;
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        core_->writing = true;
        return wait_writable().then(
            [this, p = kj::mv(pieces), first]() mutable { return writev_loop(kj::mv(p), first); });
      }
      core_->writing = false;
      return socket_error("sendmsg", errno);
    }
    last_activity_ = std::chrono::steady_clock::now();
    auto left = static_cast<size_t>(n);
    while (left > 0) {
      auto& p = pieces[first];
      if (left >= p.size()) {
        left -= p.size();
        p = nullptr;
        ++first;
      } else {
        p = p.slice(left, p.size());
        left = 0;
      }
    }
  }
}

kj::Promise<void> asio_stream::whenWriteDisconnected() { return kj::NEVER_DONE; }

void asio_stream::shutdownWrite() {
  if (!core_->writing) core_->flush_deferred();  // best effort: the peer may still want the Finish
  boost::system::error_code ec;
  core_->sock.shutdown(asio::socket_base::shutdown_send, ec);
}

void asio_stream::abortRead() {
  boost::system::error_code ec;
  core_->sock.shutdown(asio::socket_base::shutdown_receive, ec);
}

void asio_stream::close() noexcept {
  boost::system::error_code ec;
  core_->sock.shutdown(asio::socket_base::shutdown_both, ec);
}

void asio_stream::getsockopt(int level, int option, void* value, kj::uint* length) {
  socklen_t len = *length;
  if (::getsockopt(core_->sock.native_handle(), level, option, value, &len) != 0)
    kj::throwRecoverableException(socket_error("getsockopt", errno));
  *length = len;
}

void asio_stream::setsockopt(int level, int option, const void* value, kj::uint length) {
  if (::setsockopt(core_->sock.native_handle(), level, option, value, length) != 0)
    kj::throwRecoverableException(socket_error("setsockopt", errno));
}

kj::Maybe<int> asio_stream::getFd() const { return core_->sock.native_handle(); }

}  // namespace mc::rpc::detail
