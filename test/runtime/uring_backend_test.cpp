// Asio's io_uring backend as the tree builds it (lib/runtime/src/asio_impl.cpp):
// a cancel's completion reaches the cancelled operation only. Boost 1.81 left
// the user_data of cancel entries stale, so closing a socket with a read in
// flight completed the pending read of whichever socket had used the same
// ring slot 16384 entries earlier (end-of-file on a healthy connection).
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <doctest/doctest.h>

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
      mine.back()->async_read_some(asio::buffer(&buf[static_cast<std::size_t>(i)], 1),
                                   [&, i](boost::system::error_code ec, std::size_t n) {
                                     if (closing && ec == asio::error::operation_aborted) {
                                       ++victims_aborted;
                                       return;
                                     }
                                     woken.push_back(std::to_string(i) + ": " + ec.message() + ", " +
                                                     std::to_string(n) + " bytes");
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
}
