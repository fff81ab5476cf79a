#include "asio_stream.hpp"

#include <boost/asio/socket_base.hpp>
#include <kj/debug.h>

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace mc::rpc::detail {

namespace asio = boost::asio;

/// Shared with pending async_wait handlers (which outlive the stream).
struct asio_stream::core {
  explicit core(asio::ip::tcp::socket s) : sock(std::move(s)) {}
  asio::ip::tcp::socket sock;
  kj::Own<kj::PromiseFulfiller<void>> read_waiter;  // null when none
  kj::Own<kj::PromiseFulfiller<void>> write_waiter;
  bool read_wait_pending = false;
  bool write_wait_pending = false;
  bool closed = false;  // stream destroyed: handlers touch nothing KJ
};

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
  core_->sock.close(ec);  // pending waits complete (posted) with operation_aborted
}

kj::Promise<void> asio_stream::wait_readable() {
  auto paf = kj::newPromiseAndFulfiller<void>();
  core_->read_waiter = kj::mv(paf.fulfiller);
  if (!core_->read_wait_pending) {
    core_->read_wait_pending = true;
    core_->sock.async_wait(asio::socket_base::wait_read, [c = core_](boost::system::error_code ec) {
      c->read_wait_pending = false;
      if (!c->closed) complete_waiter(c->read_waiter, ec);
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
      if (!c->closed) complete_waiter(c->write_waiter, ec);
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
  return write_loop(static_cast<const kj::byte*>(buffer), size);
}

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
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return wait_writable().then([this, buf, size]() { return write_loop(buf, size); });
    return socket_error("send", errno);
  }
  return kj::READY_NOW;
}

kj::Promise<void> asio_stream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  // The pieces array itself may not outlive this call; the bytes do.
  auto copy = kj::heapArray<kj::ArrayPtr<const kj::byte>>(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) copy[i] = pieces[i];
  return writev_loop(kj::mv(copy), 0);
}

kj::Promise<void> asio_stream::writev_loop(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, size_t first) {
  int fd = core_->sock.native_handle();
  constexpr size_t max_iov = 64;
  for (;;) {
    while (first < pieces.size() && pieces[first].size() == 0) ++first;
    if (first == pieces.size()) return kj::READY_NOW;
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
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return wait_writable().then(
            [this, p = kj::mv(pieces), first]() mutable { return writev_loop(kj::mv(p), first); });
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
