// Multi-process tests: a helper process owns the memory.
#include "child_process.hpp"
#include "peer_process.hpp"
#include "transfer_fixture.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <sstream>
#include <thread>

using namespace std::chrono_literals;
using namespace mc::transfer;
using mc::transfer::test::bytes;
using mc::transfer::test::cbytes;
using mc::transfer::test::child_process;
using mc::transfer::test::helper_path;
using mc::transfer::test::serve_command;

namespace {

/// Starts a serving helper and parses its descriptor.
struct served_peer {
  explicit served_peer(std::size_t size, const std::string& bind = "127.0.0.1") : proc(serve_command(size, bind)) {
    REQUIRE(proc.started());
    auto line = proc.read_line(10s);
    REQUIRE_MESSAGE(line.has_value(), "helper did not report READY");
    std::istringstream in(*line);
    std::string tag;
    in >> tag >> desc.endpoint >> desc.address >> desc.length >> desc.token;
    REQUIRE(tag == "READY");
  }
  child_process proc;
  remote_buffer desc;
};

engine_options client_options(std::optional<transport_kind> force) {
  engine_options o;
  o.bind_host = "127.0.0.1";
  o.force = force;
  return o;
}

}  // namespace

TEST_SUITE("transfer_peer") {
  TEST_CASE("another process on this host is reached through the same-host transport automatically") {
    served_peer peer(8u << 20);
    mc::runtime::runtime rt(2);
    rt.start();
    engine e(rt, client_options(std::nullopt));
    REQUIRE(e.start());
    for (std::size_t n : {std::size_t(1), std::size_t(4097), std::size_t(1u << 20) + 1, std::size_t(8u << 20)}) {
      auto src = mc::test::random_bytes(n, n);
      auto d = peer.desc;
      d.length = n;
      REQUIRE(rt.block_on(e.write(cbytes(src), d)).has_value());
      std::vector<std::uint8_t> back(n);
      REQUIRE(rt.block_on(e.read(bytes(back), d)).has_value());
      CHECK(mc::test::checksum(back.data(), n) == mc::test::checksum(src.data(), n));
    }
    auto bad = peer.desc;
    bad.token += 1;
    std::vector<std::uint8_t> x(10);
    CHECK(mc::is(rt.block_on(e.write(cbytes(x), bad)).error(), mc::errc::access_denied));
    auto past = peer.desc;
    past.address += past.length - 5;  // 10 bytes from 5 before the end
    past.length = 10;
    CHECK(mc::is(rt.block_on(e.read(bytes(x), past)).error(), mc::errc::access_denied));
    auto s = e.stats();
    CHECK(s.initiated[std::size_t(transport_kind::same_host)].write_ops == 4);
    CHECK(s.initiated[std::size_t(transport_kind::tcp)].write_ops == 0);
    e.stop();
  }

  TEST_CASE("the helper's own client checks pass over TCP and same-host") {
    served_peer peer(6u << 20);
    for (const char* force : {"tcp", "same_host"}) {
      child_process c({helper_path(), "client", peer.desc.endpoint, std::to_string(peer.desc.address),
                       std::to_string(peer.desc.length), std::to_string(peer.desc.token), force});
      auto via = c.read_line(30s);
      CHECK(c.wait() == 0);
      REQUIRE(via.has_value());
      CHECK(*via == std::string("VIA 0 ") + force);
    }
  }

  TEST_CASE("a peer killed mid-transfer fails the transfer promptly, never reports success") {
    for (auto force : {transport_kind::tcp, transport_kind::same_host}) {
      CAPTURE(to_string(force));
      served_peer peer(64u << 20);
      mc::runtime::runtime rt(2);
      rt.start();
      auto o = client_options(force);
      o.slice_size = 256 * 1024;
      engine e(rt, o);
      REQUIRE(e.start());
      auto src = mc::test::random_bytes(64u << 20, 1);
      std::promise<void> first;
      std::atomic<bool> killed{false};
      mc::result<void> last;
      std::chrono::steady_clock::time_point failed_at;
      std::thread t([&] {
        bool told = false;
        for (int i = 0; i < 100000; ++i) {
          bool before = killed.load();
          last = rt.block_on(e.write(cbytes(src), peer.desc, 10s));
          if (!last) {
            failed_at = std::chrono::steady_clock::now();
            break;
          }
          // A success must have started before the kill.
          if (before) {
            last = mc::fail(mc::errc::internal_error);
            break;
          }
          if (!told) {
            first.set_value();
            told = true;
          }
        }
      });
      first.get_future().wait();
      auto kill_at = std::chrono::steady_clock::now();
      killed = true;
      peer.proc.kill(SIGKILL);
      peer.proc.wait();
      t.join();
      REQUIRE(last.has_error());
      CHECK(mc::is(last.error(), mc::errc::transfer_fail));
      CHECK(failed_at - kill_at < 5s);
      e.stop();
    }
  }

  TEST_CASE("a stalled peer (SIGSTOP) yields TIMEOUT within the deadline") {
    served_peer peer(4u << 20);
    mc::runtime::runtime rt(1);
    rt.start();
    engine e(rt, client_options(transport_kind::tcp));
    REQUIRE(e.start());
    std::vector<std::uint8_t> buf(4u << 20);
    REQUIRE(rt.block_on(e.read(bytes(buf), peer.desc)).has_value());
    peer.proc.kill(SIGSTOP);
    auto t0 = std::chrono::steady_clock::now();
    auto r = rt.block_on(e.read(bytes(buf), peer.desc, 500ms));
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
    peer.proc.kill(SIGKILL);
    peer.proc.wait();
    e.stop();
  }
}
