// store_bench's runtime floor: the cheapest get-shaped exchange our runtime
// can do between two processes, with no RPC, no store and no lookup. A
// child process (this binary run with --floor-server) answers every 16-byte
// request on a connection with `size` bytes; this process runs `conc`
// coroutines on its runtime, one connection each, one request at a time (the
// shape of redis-benchmark -c conc against redis-server). Its rows
// (tcp_floor_get_*) say what one round trip costs on Boost.Asio here, next
// to Redis measured in the same run: the bound below which no protocol on
// this runtime gets.
#pragma once

#include "bench_util.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/task.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <stdexcept>
#include <vector>

#include <unistd.h>

namespace store_floor {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using floor_clock = std::chrono::steady_clock;

inline constexpr std::size_t request_bytes = 16;

inline mc::task<void> serve(tcp::socket s, std::size_t size) {
  std::vector<std::byte> reply(size, std::byte{0x5a});
  std::array<std::byte, request_bytes> req{};
  for (;;) {
    auto [ec, n] = co_await asio::async_read(s, asio::buffer(req), asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    auto [wec, w] = co_await asio::async_write(s, asio::buffer(reply), asio::as_tuple(asio::use_awaitable));
    if (wec) co_return;
  }
}

/// The child's main (never returns while its parent lives): a runtime of
/// `threads` threads, like the owner's, connections spread over them.
[[noreturn]] inline void server_main(std::uint16_t port, std::size_t size, std::size_t threads) {
  mc::runtime::runtime rt(threads);
  rt.start();
  tcp::acceptor acc(rt.context(0), {asio::ip::address_v4::loopback(), port});
  asio::co_spawn(
      rt.executor(0),
      [](tcp::acceptor& acc, mc::runtime::runtime& rt, std::size_t size) -> mc::task<void> {
        for (std::size_t next = 0;; ++next) {
          tcp::socket s(rt.context(next % rt.size()));
          auto [ec] = co_await acc.async_accept(s, asio::as_tuple(asio::use_awaitable));
          if (ec) co_return;
          s.set_option(tcp::no_delay(true));
          asio::co_spawn(rt.executor(next % rt.size()), serve(std::move(s), size), asio::detached);
        }
      }(acc, rt, size),
      asio::detached);
  for (;;) ::pause();  // ended by the parent's SIGTERM (or its death: PR_SET_PDEATHSIG)
}

struct floor_sample {
  double ops_per_s = 0;
  std::vector<double> us;
};

/// `conc` coroutines spread over `rt`'s threads, each on its own connection
/// to the floor server, one request at a time for `seconds`.
inline floor_sample drive(mc::runtime::runtime& rt, std::uint16_t port, std::size_t size, int conc, double seconds) {
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(conc));
  std::atomic<long> ops{0};
  const auto until =
      floor_clock::now() + std::chrono::duration_cast<floor_clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::future<void>> done;
  const auto t0 = floor_clock::now();
  for (std::size_t w = 0; w < static_cast<std::size_t>(conc); ++w) {
    auto p = std::make_shared<std::promise<void>>();
    done.push_back(p->get_future());
    asio::co_spawn(
        rt.executor(w % rt.size()),
        [](std::uint16_t port, std::size_t size, std::vector<double>& lat, std::atomic<long>& ops,
           floor_clock::time_point until) -> mc::task<void> {
          tcp::socket s(co_await asio::this_coro::executor);
          co_await s.async_connect({asio::ip::address_v4::loopback(), port}, asio::use_awaitable);
          s.set_option(tcp::no_delay(true));
          std::array<std::byte, request_bytes> req{};
          std::vector<std::byte> reply(size);
          while (floor_clock::now() < until) {
            auto t = floor_clock::now();
            co_await asio::async_write(s, asio::buffer(req), asio::use_awaitable);
            co_await asio::async_read(s, asio::buffer(reply), asio::use_awaitable);
            lat.push_back(std::chrono::duration<double, std::micro>(floor_clock::now() - t).count());
            ++ops;
          }
        }(port, size, lat[w], ops, until),
        [p](std::exception_ptr x) { x ? p->set_exception(x) : p->set_value(); });
  }
  for (auto& f : done) f.get();  // rethrows a failed connection
  floor_sample out;
  out.ops_per_s = static_cast<double>(ops.load()) / mc::bench::seconds_since(t0);
  for (auto& l : lat) out.us.insert(out.us.end(), l.begin(), l.end());
  return out;
}

}  // namespace store_floor
