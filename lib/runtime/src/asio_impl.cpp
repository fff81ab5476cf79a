// Boost.Asio's compiled part, once for the whole tree
// (BOOST_ASIO_SEPARATE_COMPILATION is a project-wide define: every other
// translation unit sees only declarations), with one correction to its
// io_uring backend.
//
// Boost 1.81's io_uring_service (Debian bookworm's libboost1.81-dev) takes a
// submission queue entry with io_uring_get_sqe() and, for a cancel (socket
// close, a cancelled read or write, shutdown) and for a timeout removal,
// never sets its user_data. liburing does not clear it either, so the entry
// keeps the user_data of the operation that used the same ring slot 16384
// entries earlier, and the cancel's completion is delivered to *that*
// operation's queue: a pending read on an unrelated socket completes with
// end-of-file, a pending write "completes" after 0 bytes (asio's async_write
// then reports success with part of the buffer unsent), a queue already on
// the completed list is pushed twice and the operations behind it are lost.
// Found by the chaos soak (a Python get_batch that never returned, with no
// call in flight); test/runtime/uring_backend_test.cpp reproduces it. Fixed
// upstream in asio 1.25 (Boost 1.82, chriskohlhoff/asio 0080ec1c) by
// clearing user_data in get_sqe(); this does the same: every entry the
// backend takes starts with user_data = nullptr, which the backend's reaper
// ignores, and the entries that carry data set it as before.
#include <liburing.h>

namespace {

io_uring_sqe* mc_get_sqe_cleared(io_uring* ring) {
  io_uring_sqe* sqe = ::io_uring_get_sqe(ring);
  if (sqe != nullptr) ::io_uring_sqe_set_data(sqe, nullptr);
  return sqe;
}

}  // namespace

#ifndef BOOST_ASIO_SEPARATE_COMPILATION
#error "the tree is built with -DBOOST_ASIO_SEPARATE_COMPILATION (meson.build)"
#endif

// Only this translation unit compiles io_uring_service.ipp: the rename
// reaches its calls and nothing else.
#define io_uring_get_sqe mc_get_sqe_cleared
#include <boost/asio/impl/src.hpp>
#undef io_uring_get_sqe
