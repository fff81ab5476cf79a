#pragma once
// Attach tests: a cluster whose node 0 serves the attach service, and an
// attacher (its own runtime, as in another process) connected to it.
#include "mc/store/attach.hpp"
#include "mc/store/attached_client.hpp"
#include "pieces.hpp"
#include "store_fixture.hpp"

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

namespace mc::test {

/// Concatenation by appending (gcc 12 at -O3 warns falsely about
/// "literal" + std::string).
template <class... T>
std::string cat(const T&... parts) {
  std::string s;
  ((s += parts), ...);
  return s;
}

/// Fills buffers that must stay untouched.
inline constexpr std::uint8_t sentinel_byte = 0xA5;

/// A cluster of `n` nodes; node 0 serves the attach service (ephemeral port).
struct attached_cluster {
  cluster cl;
  std::unique_ptr<mc::store::attach_server> server;

  /// `tiers`: the nodes' tiers (the spec's JSON; empty = 64 MiB DRAM).
  explicit attached_cluster(std::size_t n = 1, const std::string& transport = "auto",
                            mc::store::attach_server_options o = {}, const std::string& tiers = {}) {
    for (std::size_t i = 0; i < n; ++i) cl.add(cat("node", std::to_string(i)), tiers, transport);
    o.ephemeral = true;
    std::string why;
    auto s = mc::store::attach_server::start(*cl.nodes[0].rt, *cl.nodes[0].client, o, &why);
    REQUIRE_MESSAGE(s.has_value(), why);
    server = std::move(*s);
  }
  ~attached_cluster() {
    if (server) server->stop();
  }
  mc::store::client& node(std::size_t i = 0) { return *cl.nodes.at(i).client; }
  std::string server_address() const { return cat("127.0.0.1:", std::to_string(cl.nodes[0].client->rpc_port())); }
};

/// An attached process stand-in: its own runtime and attached_client.
struct attacher {
  mc::runtime::runtime rt{2};
  std::unique_ptr<mc::store::attached_client> c;

  attacher(const std::string& server_address, std::uint16_t attach_port, mc::store::attach_options o = {}) {
    rt.start();
    o.attach_port = attach_port;
    std::string why;
    auto r = mc::store::attached_client::connect(rt, server_address, o, &why);
    REQUIRE_MESSAGE(r.has_value(), why);
    c = std::move(*r);
  }
  explicit attacher(attached_cluster& a, mc::store::attach_options o = {})
      : attacher(a.server_address(), a.server->port(), o) {}
  ~attacher() {
    if (c) c->stop();
    c.reset();
    mc::rpc::shutdown(rt);
    rt.stop();
  }
  template <class T>
  T on(mc::task<T> t, std::size_t thread = 0) {
    return rt.block_on(std::move(t), thread);
  }
};

// Plain functions returning the calls' tasks: callers may pass braced
// temporaries (a coroutine's own parameters must not be initialised from
// them on gcc 12, which destroys such temporaries twice).
inline mc::task<mc::result<void>> a_put(mc::store::attached_client& c, std::string key, const_pieces p) {
  return c.put_parts(std::move(key), std::move(p));
}
inline mc::task<mc::result<std::size_t>> a_get(mc::store::attached_client& c, std::string key, mut_pieces p) {
  return c.get_parts(std::move(key), std::move(p));
}
inline mc::task<std::vector<mc::result<void>>> a_batch_put(mc::store::attached_client& c, std::vector<std::string> k,
                                                           std::vector<const_pieces> v) {
  return c.batch_put_parts(std::move(k), std::move(v));
}
inline mc::task<std::vector<mc::result<std::size_t>>> a_batch_get(mc::store::attached_client& c,
                                                                  std::vector<std::string> k,
                                                                  std::vector<mut_pieces> v) {
  return c.batch_get_parts(std::move(k), std::move(v));
}
inline mc::task<std::vector<mc::result<bool>>> a_exists(mc::store::attached_client& c, std::vector<std::string> k) {
  return c.batch_exists(std::move(k));
}
inline mc::task<mc::result<void>> a_remove(mc::store::attached_client& c, std::string k) {
  return c.remove(std::move(k));
}
inline mc::task<mc::result<std::uint64_t>> a_size(mc::store::attached_client& c, std::string k) {
  return c.size_of(std::move(k));
}
inline mc::task<mc::result<std::size_t>> n_get(mc::store::client& c, std::string key, std::span<std::byte> buf) {
  return c.get(std::move(key), buf);
}
inline mc::task<mc::result<void>> n_put(mc::store::client& c, std::string key, std::span<const std::byte> v) {
  return c.put(std::move(key), v);
}

inline const_pieces one(const std::vector<std::uint8_t>& v) { return {bytes_of(v)}; }
inline mut_pieces one_mut(std::vector<std::uint8_t>& v) { return {writable(v)}; }

/// Waits (up to 30 s, polling: the node's gauges have no event) until `ok()`.
inline bool eventually(const std::function<bool()>& ok) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ok()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

/// Every gauge of the attach server back at 0 (nothing pinned or held).
inline bool drained(const mc::store::attach_server& s) {
  auto st = s.stats();
  return st.calls_in_flight == 0 && st.inflight_keys == 0 && st.inflight_bytes == 0 && st.staging_bytes == 0;
}

}  // namespace mc::test
