// The asio socket backend the tree is built on (meson.build: epoll, or
// io_uring on a Boost whose io_uring backend is sound) routes every completion
// to its own operation. Boost 1.81's io_uring backend fails both cases:
// - it left the user_data of cancel entries stale, so closing a socket with a
//   read in flight completed the pending read of whichever socket had used the
//   same ring slot 16384 entries earlier (end-of-file on a healthy
//   connection);
// - it recycled a closed socket's state while the kernel still held its
//   cancelled read, so the next socket opened on the thread had that old read
//   at the head of its queue: the old read got the new socket's data and the
//   new socket's read never completed (found by the chaos soak as a Python
//   get_batch that never returned).
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <doctest/doctest.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
using stream = asio::local::stream_protocol::socket;

TEST_SUITE("runtime") {
  TEST_CASE("closing sockets with reads in flight never completes another socket's read") {
    asio::io_context io(1);
    // Victims: connected pairs whose reads stay pending (the peer never
    // writes), each read's entry in its own ring slot.
    constexpr int victims = 200;
    std::vector<std::unique_ptr<stream>> mine, peers;
    std::vector<char> buf(victims);
    std::vector<std::string> woken;  // victims completed before their close
    bool closing = false;
    int victims_aborted = 0;
    for (int i = 0; i < victims; ++i) {
      mine.push_back(std::make_unique<stream>(io));
      peers.push_back(std::make_unique<stream>(io));
      asio::local::connect_pair(*mine.back(), *peers.back());
      mine.back()->async_read_some(
          asio::buffer(&buf[static_cast<std::size_t>(i)], 1), [&, i](boost::system::error_code ec, std::size_t n) {
            if (closing && ec == asio::error::operation_aborted) {
              ++victims_aborted;
              return;
            }
            woken.push_back(std::to_string(i) + ": " + ec.message() + ", " + std::to_string(n) + " bytes");
          });
    }
    io.poll();
    // Churn: more than two laps of the ring. Each round starts a read on a
    // fresh pair and closes that socket (a read entry, then a cancel entry);
    // every seventh round also completes a read with data (one entry), so
    // the cancels fall on the victims' slots of either parity.
    int churn_aborted = 0, churn_other = 0, data_reads = 0;
    char b = 0;
    char d = 0;
    for (int round = 0; round < 30000; ++round) {
      stream x(io), y(io);
      asio::local::connect_pair(x, y);
      x.async_read_some(asio::buffer(&b, 1), [&](boost::system::error_code ec, std::size_t) {
        ec == asio::error::operation_aborted ? ++churn_aborted : ++churn_other;
      });
      io.poll();
      x.close();
      io.poll();
      if (round % 7 == 0) {
        stream p(io), q(io);
        asio::local::connect_pair(p, q);
        p.async_read_some(asio::buffer(&d, 1), [&](boost::system::error_code ec, std::size_t n) {
          if (!ec && n == 1) ++data_reads;
        });
        io.poll();
        asio::write(q, asio::buffer("x", 1));
        for (int k = 0; k < 10 && data_reads <= round / 7; ++k) io.poll();
      }
    }
    for (int k = 0; k < 10; ++k) io.poll();
    INFO("first spurious completion: " << (woken.empty() ? std::string("none") : woken.front()));
    CHECK(woken.size() == 0);
    CHECK(churn_aborted == 30000);
    CHECK(churn_other == 0);
    CHECK(data_reads == 30000 / 7 + 1);
    // The victims' own reads are still there, and end when their sockets close.
    closing = true;
    for (auto& s : mine) s->close();
    for (int k = 0; k < 10 && victims_aborted < victims; ++k) io.poll();
    CHECK(victims_aborted == victims);
  }

  TEST_CASE("a socket opened right after closing one with a read in flight gets its own data") {
    asio::io_context io(1);
    auto work = asio::make_work_guard(io);
    int old_aborted = 0, old_other = 0, new_ok = 0;
    std::string first_failure;
    constexpr int rounds = 500;
    for (int round = 0; round < rounds; ++round) {
      auto old_sock = std::make_unique<stream>(io);
      stream old_peer(io);
      asio::local::connect_pair(*old_sock, old_peer);
      std::array<char, 8> old_buf{};
      bool old_done = false;
      old_sock->async_read_some(asio::buffer(old_buf), [&](boost::system::error_code ec, std::size_t n) {
        old_done = true;
        if (ec == asio::error::operation_aborted) {
          ++old_aborted;
        } else {
          ++old_other;
          if (first_failure.empty())
            first_failure = "closed socket's read: " + ec.message() + ", " + std::to_string(n) + " bytes";
        }
      });
      io.poll();          // the read is waiting in the kernel
      old_sock->close();  // ... and is cancelled; a new socket comes at once
      stream fresh(io), fresh_peer(io);
      asio::local::connect_pair(fresh, fresh_peer);
      std::array<char, 8> buf{};
      bool done = false;
      boost::system::error_code got_ec;
      std::size_t got = 0;
      fresh.async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, std::size_t n) {
        done = true;
        got_ec = ec;
        got = n;
      });
      asio::write(fresh_peer, asio::buffer("hello", 5));
      for (int k = 0; k < 100 && !(done && old_done); ++k) io.poll();
      if (done && !got_ec && got == 5 && std::string(buf.data(), 5) == "hello") {
        ++new_ok;
      } else if (first_failure.empty()) {
        first_failure =
            "new socket's read: " + std::string(done ? "completed " + got_ec.message() : "never completed") + ", " +
            std::to_string(got) + " bytes";
      }
    }
    INFO("first failure: " << (first_failure.empty() ? std::string("none") : first_failure));
    CHECK(new_ok == rounds);
    CHECK(old_aborted == rounds);
    CHECK(old_other == 0);
  }
}
