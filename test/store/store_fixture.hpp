#pragma once
// An in-process P2P cluster for store tests: one master and N clients, each
// client on its own runtime (as if on its own node).
#include "mc/master/master_server.hpp"
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mc::test {

struct node {
  std::unique_ptr<mc::runtime::runtime> rt;
  std::unique_ptr<mc::store::client> client;
};

struct cluster {
  mc::runtime::runtime master_rt{2};
  std::unique_ptr<mc::master::master_server> master;
  std::vector<node> nodes;
  std::vector<std::string> temp_dirs;
  std::uint16_t master_port = 0;
  std::function<void(mc::master::master_options&)> tweak_master_;

  explicit cluster(std::function<void(mc::master::master_options&)> tweak_master = {})
      : tweak_master_(std::move(tweak_master)) {
    master_rt.start();
    launch_master(0);
    master_port = master->port();
  }

  std::string master_address() const { return "127.0.0.1:" + std::to_string(master_port); }

  /// Stops the master: its table is lost, as a killed master's; clients'
  /// master calls fail until start_master().
  void stop_master() {
    master->stop();
    master.reset();
  }

  /// Starts an empty master on the port the first one was given (the clients
  /// re-register with it and re-publish their keys).
  void start_master() {
    REQUIRE(!master);
    launch_master(master_port);
  }

  /// A master on 127.0.0.1:`port` (0: any), with the cluster's tweak applied.
  void launch_master(std::uint16_t port) {
    mc::master::master_options mo;
    mo.rpc_address = "127.0.0.1";
    mo.rpc_port = port;
    if (tweak_master_) tweak_master_(mo);
    master = std::make_unique<mc::master::master_server>(master_rt, mo);
    REQUIRE(master->start());
  }

  /// Adds a client; `tiers_json` empty = 64 MiB DRAM. "SSD" in it is given a
  /// fresh temp directory through the placeholder @DIR@.
  mc::store::client& add(const std::string& id, std::string tiers_json = {}, const std::string& transport = "auto",
                         const std::function<void(mc::store::client_options&)>& tweak = {}) {
    mc::store::client_options o;
    o.client_id = id;
    o.master_server_address = master_address();
    o.host = "127.0.0.1";
    o.port = 0;
    o.client_rpc_port = 0;
    o.rpc_timeout = std::chrono::seconds(5);
    o.heartbeat_interval = std::chrono::milliseconds(200);
    o.transfer_transport = transport;
    if (tiers_json.empty()) tiers_json = R"({"tiers":[{"type":"DRAM","capacity":"64MiB","priority":100}]})";
    if (auto pos = tiers_json.find("@DIR@"); pos != std::string::npos) {
      temp_dirs.push_back(make_temp_dir("mc-store-ssd"));
      tiers_json.replace(pos, 5, temp_dirs.back());
    }
    o.tiered_backend_config = tiers_json;
    if (tweak) tweak(o);
    mc::config::option_set dummy("t", "t");
    auto err = mc::store::resolve(o, dummy);
    REQUIRE_MESSAGE(err.empty(), err);
    node n;
    n.rt = std::make_unique<mc::runtime::runtime>(2);
    n.rt->start();
    std::string why;
    auto c = mc::store::client::start(*n.rt, o, &why);
    REQUIRE_MESSAGE(c.has_value(), why);
    n.client = std::move(*c);
    nodes.push_back(std::move(n));
    return *nodes.back().client;
  }

  /// Runs a coroutine on node i's runtime and waits.
  template <class T>
  T on(std::size_t i, mc::task<T> t) {
    return nodes.at(i).rt->block_on(std::move(t));
  }

  ~cluster() {
    for (auto& n : nodes) {
      n.client->stop();
      n.client.reset();
      mc::rpc::shutdown(*n.rt);
      n.rt->stop();
    }
    if (master) master->stop();
    mc::rpc::shutdown(master_rt);
    master_rt.stop();
    for (auto& d : temp_dirs) remove_tree(d);
  }
};

inline std::span<const std::byte> bytes_of(const std::vector<std::uint8_t>& v) { return std::as_bytes(std::span(v)); }
inline std::span<std::byte> writable(std::vector<std::uint8_t>& v) { return std::as_writable_bytes(std::span(v)); }

/// `c.put(key)` of `v`'s bytes with `o`.
inline mc::task<mc::result<void>> put(mc::store::client& c, std::string key, const std::vector<std::uint8_t>& v,
                                      mc::store::put_options o = {}) {
  co_return co_await c.put(std::move(key), bytes_of(v), std::move(o));
}

/// `c.get(key)` into `out` (its whole size is the buffer): the value's size, or the get's error.
inline mc::task<mc::result<std::size_t>> get(mc::store::client& c, std::string key, std::vector<std::uint8_t>& out) {
  co_return co_await c.get(std::move(key), writable(out));
}

}  // namespace mc::test
