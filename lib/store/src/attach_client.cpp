// mc::store::attached_client: the attacher side of standalone mode. Calls
// are split into RPCs only to fit the node's bounds; the caller's memory is
// exposed per call (fresh tokens, revoked when the call returns).
#include "mc/store/attached_client.hpp"

#include "attach.capnp.h"
#include "mc/rpc/capnp.hpp"
#include "mc/runtime/endpoint.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/store/attach.hpp"
#include "mc/store/client_service.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/store/peer_client.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace mc::store {
namespace {

using mc::transfer::region;
using mc::transfer::region_access;

/// Whether `host` (no brackets) names this host: loopback, "localhost", or
/// (resolved) an address of one of its interfaces. Blocking (getaddrinfo):
/// connect() only.
bool is_this_host(const std::string& host) {
  if (host == "localhost") return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) ifs = nullptr;
  bool local = false;
  for (auto* a = res; a && !local; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      auto ip = reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr;
      if ((ntohl(ip.s_addr) >> 24) == 127) local = true;
      for (auto* i = ifs; i && !local; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == ip.s_addr)
          local = true;
    } else if (a->ai_family == AF_INET6) {
      auto ip = reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr;
      if (IN6_IS_ADDR_LOOPBACK(&ip)) local = true;
      for (auto* i = ifs; i && !local; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6 &&
            std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, &ip, sizeof ip) == 0)
          local = true;
    }
  }
  if (ifs) freeifaddrs(ifs);
  freeaddrinfo(res);
  return local;
}

/// One key of a call, ready to be sent: its pieces exposed to the node.
struct prepared {
  std::string key;
  std::vector<region> regions;  // revoked when the call returns
  std::uint64_t room = 0;
};

std::uint32_t timeout_ms(std::chrono::milliseconds d) {
  return static_cast<std::uint32_t>(std::clamp<long long>(d.count(), 1, max_request_timeout_ms));
}

template <class T>
result<T> error_of(const boost::system::error_code& ec) {
  return result<T>(boost::system::in_place_error, ec);
}

}  // namespace

struct attached_client::impl {
  mc::runtime::runtime& rt;
  attach_options opts;
  std::string endpoint;
  std::unique_ptr<mc::transfer::engine> eng;
  std::uint16_t transfer_port = 0;
  std::string node_id;
  std::uint32_t max_keys = 1;
  std::uint32_t max_pieces = 1;
  std::unique_ptr<std::byte[]> local;
  std::size_t local_size = 0;
  region local_region;
  std::atomic<bool> stopped{false};

  impl(mc::runtime::runtime& r, attach_options o) : rt(r), opts(std::move(o)) {}

  mc::duration call_timeout() const { return opts.rpc_timeout + std::chrono::milliseconds(500); }

  /// Starts the attacher's engine on 127.0.0.1 (ephemeral port) and
  /// registers the local buffer. Errors: rpc_fail / the registration's.
  result<void> start_engine(std::string* why) {
    mc::transfer::engine_options eo;
    eo.bind_host = "127.0.0.1";
    eo.advertise_host = "127.0.0.1";
    eo.port = 0;
    eo.default_timeout = opts.rpc_timeout;
    eng = std::make_unique<mc::transfer::engine>(rt, eo);
    if (auto r = eng->start(); !r) {
      *why = "attach: cannot start the TransferEngine";
      return fail(errc::rpc_fail);
    }
    auto port = server_port_of(eng->endpoint());
    if (!port) {
      *why = "attach: the TransferEngine has no port";
      return fail(errc::rpc_fail);
    }
    transfer_port = *port;
    if (opts.local_buffer_bytes == 0) return {};
    local_size = static_cast<std::size_t>(opts.local_buffer_bytes);
    local = std::make_unique_for_overwrite<std::byte[]>(local_size);
    auto r = eng->register_memory(local.get(), local_size, region_access::remote_read_write);
    if (!r) {
      *why = "attach: cannot register the local buffer";
      return r.error();
    }
    local_region = std::move(*r);
    return {};
  }

  struct hello_out {
    result<void> r;
    std::uint32_t version = 0, max_keys = 0, max_pieces = 0;
    std::string node_id;
  };
  /// The handshake (one round trip).
  task<hello_out> hello() {
    hello_out o;
    auto cap = co_await mc::rpc::connect<Attach>(endpoint, attach_service_name);
    if (!cap) {
      o.r = cap.error();
      co_return o;
    }
    auto req = cap->helloRequest();
    req.setVersion(attach_protocol_version);
    auto resp = co_await mc::rpc::call(req.send(), call_timeout());
    if (!resp) {
      o.r = resp.error();
      co_return o;
    }
    o.version = resp->getVersion();
    o.max_keys = resp->getMaxKeys();
    o.max_pieces = resp->getMaxPieces();
    o.node_id = resp->getNodeId();
    co_return o;
  }

  /// Exposes `pieces` to the node with `access` for one call: derived from
  /// the local buffer's registration when inside it, else registered on
  /// their own. (Never derived from whatever registration contains them:
  /// that may be another call's, revoked when that call ends.)
  result<void> expose(prepared& p, const std::vector<std::span<std::byte>>& pieces, region_access access) {
    const auto* lb = local.get();
    for (auto& s : pieces) {
      const bool inside = lb && s.data() >= lb && s.size() <= local_size &&
                          static_cast<std::size_t>(s.data() - lb) <= local_size - s.size();
      auto r = inside ? eng->register_within(local_region, static_cast<std::uint64_t>(s.data() - lb), s.size(), access)
                      : eng->register_memory(s.data(), s.size(), access);
      if (!r) return r.error();
      p.room += s.size();
      p.regions.push_back(std::move(*r));
    }
    return {};
  }

  /// Fills a batchPut / batchGet request with `items[idx...]`.
  template <class Builder>
  void fill(Builder& req, const std::vector<prepared>& items, const std::vector<std::size_t>& idx) {
    auto peer = req.initPeer();
    peer.setPort(transfer_port);
    peer.setInstance(eng->instance_id());
    req.setTimeoutMs(timeout_ms(opts.rpc_timeout));
    auto list = req.initItems(static_cast<unsigned>(idx.size()));
    for (unsigned k = 0; k < idx.size(); ++k) {
      auto& it = items[idx[k]];
      list[k].setKey(it.key);
      auto ps = list[k].initPieces(static_cast<unsigned>(it.regions.size()));
      for (unsigned j = 0; j < it.regions.size(); ++j) {
        auto d = it.regions[j].describe();
        ps[j].setAddress(d.address);
        ps[j].setLength(d.length);
        ps[j].setToken(d.token);
      }
    }
  }

  /// Runs one RPC for `items[idx...]`; writes each item's outcome into
  /// out[idx[k]] (a get's size is checked against its room).
  task<result<void>> run_chunk(bool put, const std::vector<prepared>& items, std::vector<std::size_t> idx,
                               std::vector<result<std::uint64_t>>& out) {
    auto fail_all = [&](const boost::system::error_code& ec) {
      for (auto i : idx) out[i] = ec;
      return result<void>{};
    };
    auto cap = co_await mc::rpc::connect<Attach>(endpoint, attach_service_name);
    if (!cap) co_return fail_all(cap.error());
    std::vector<std::pair<std::int32_t, std::uint64_t>> got;
    auto collect = [&](auto results) {
      for (auto r : results) got.emplace_back(r.getCode(), r.getSize());
    };
    if (put) {
      auto req = cap->batchPutRequest();
      fill(req, items, idx);
      auto resp = co_await mc::rpc::call(req.send(), call_timeout());
      if (!resp) co_return fail_all(resp.error());
      collect(resp->getResults());
    } else {
      auto req = cap->batchGetRequest();
      fill(req, items, idx);
      auto resp = co_await mc::rpc::call(req.send(), call_timeout());
      if (!resp) co_return fail_all(resp.error());
      collect(resp->getResults());
    }
    if (got.size() != idx.size()) co_return fail_all(make_error_code(errc::rpc_fail));
    for (std::size_t k = 0; k < idx.size(); ++k) {
      auto code = from_wire_code(got[k].first);
      if (!code)
        out[idx[k]] = code.error();
      else if (!put && (got[k].second == 0 || got[k].second > items[idx[k]].room))
        out[idx[k]] = make_error_code(errc::rpc_fail);  // a size we never asked for
      else
        out[idx[k]] = got[k].second;
    }
    co_return result<void>{};
  }

  /// Sends the ready items in as few RPCs as the node's bounds allow, all
  /// at once.
  task<void> run(bool put, const std::vector<prepared>& items, const std::vector<std::size_t>& ready,
                 std::vector<result<std::uint64_t>>& out) {
    std::vector<task<result<void>>> work;
    std::vector<std::size_t> chunk;
    std::uint64_t pieces = 0;
    for (auto i : ready) {
      auto n = items[i].regions.size();
      if (!chunk.empty() && (chunk.size() >= max_keys || pieces + n > max_pieces)) {
        work.push_back(run_chunk(put, items, std::move(chunk), out));
        chunk = {};
        pieces = 0;
      }
      chunk.push_back(i);
      pieces += n;
    }
    if (!chunk.empty()) work.push_back(run_chunk(put, items, std::move(chunk), out));
    (void)co_await mc::when_all(std::move(work));
  }

  /// The common part of the put and get batches: local checks, exposure,
  /// the RPCs. `check` returns the item's local error, if any.
  template <class Span>
  task<std::vector<result<std::uint64_t>>> batch(bool put, std::vector<std::string> keys,
                                                 std::vector<std::vector<Span>> values) {
    const auto n = keys.size();
    std::vector<result<std::uint64_t>> out(n, make_error_code(errc::invalid_params));
    if (stopped.load(std::memory_order_acquire)) {
      std::fill(out.begin(), out.end(), make_error_code(errc::shutting_down));
      co_return out;
    }
    if (values.size() != n || n > opts.max_batch_keys) co_return out;
    std::vector<prepared> items(n);
    std::vector<std::size_t> ready;
    const auto access = put ? region_access::remote_read : region_access::remote_write;
    for (std::size_t i = 0; i < n; ++i) {
      auto& it = items[i];
      it.key = std::move(keys[i]);
      if (auto k = check_key(it.key); !k) {
        out[i] = k.error();
        continue;
      }
      std::vector<std::span<std::byte>> pieces;
      for (auto& s : values[i])
        if (!s.empty()) pieces.emplace_back(const_cast<std::byte*>(s.data()), s.size());
      if (values[i].size() > max_value_pieces || (put && pieces.empty())) continue;  // invalid_params
      if (auto e = expose(it, pieces, access); !e) {
        out[i] = e.error();
        continue;
      }
      ready.push_back(i);
    }
    if (!ready.empty()) co_await run(put, items, ready, out);
    co_return out;
  }
};

result<std::unique_ptr<attached_client>> attached_client::connect(mc::runtime::runtime& rt, std::string server_address,
                                                                  attach_options opts, std::string* why) {
  auto refuse = [&](errc e, std::string text) -> result<std::unique_ptr<attached_client>> {
    if (why) *why = std::move(text);
    return fail(e);
  };
  auto server = mc::endpoint::parse(server_address);
  if (!server) return refuse(errc::invalid_params, "attach: server_address must be host:port");
  if (!is_this_host(server->host())) {
    std::string text = "attach: ";
    text += server_address;
    text += " is not on this host";
    return refuse(errc::invalid_params, std::move(text));
  }
  if (opts.rpc_timeout.count() <= 0 || opts.max_batch_keys == 0)
    return refuse(errc::invalid_params, "attach: rpc_timeout and max_batch_keys must be positive");
  auto p = std::make_unique<impl>(rt, opts);
  // The node's attach listener: loopback, its attach port (never 0: the RPC port is not).
  const auto attach_port = opts.attach_port ? opts.attach_port : derived_attach_port(server->port());
  p->endpoint = mc::endpoint::make("127.0.0.1", attach_port)->str();
  std::string text;
  if (auto r = p->start_engine(&text); !r) return refuse(to_errc(r.error()), std::move(text));
  auto h = rt.block_on(p->hello());
  if (!h.r) {
    text = "attach: ";
    text += p->endpoint;
    text += ": ";
    text += h.r.error().message();
    return refuse(to_errc(h.r.error()), std::move(text));
  }
  if (h.version != attach_protocol_version) return refuse(errc::unsupported, "attach: protocol version mismatch");
  p->max_keys = std::clamp<std::uint32_t>(h.max_keys, 1, 65536);  // the node's word, within reason
  p->max_pieces = std::clamp<std::uint32_t>(h.max_pieces, max_value_pieces, max_attach_pieces_per_call);
  p->node_id = std::move(h.node_id);
  return std::unique_ptr<attached_client>(new attached_client(std::move(p)));
}

attached_client::attached_client(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

attached_client::~attached_client() { stop(); }

void attached_client::stop() {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  impl_->local_region.reset();
  impl_->eng->stop();
}

task<result<void>> attached_client::put_parts(std::string key, std::vector<std::span<const std::byte>> pieces) {
  std::vector<std::string> keys;
  keys.push_back(std::move(key));
  std::vector<std::vector<std::span<const std::byte>>> values;
  values.push_back(std::move(pieces));
  auto r = co_await batch_put_parts(std::move(keys), std::move(values));
  co_return std::move(r.front());
}

task<result<std::size_t>> attached_client::get_parts(std::string key, std::vector<std::span<std::byte>> pieces) {
  std::vector<std::string> keys;
  keys.push_back(std::move(key));
  std::vector<std::vector<std::span<std::byte>>> values;
  values.push_back(std::move(pieces));
  auto r = co_await batch_get_parts(std::move(keys), std::move(values));
  co_return std::move(r.front());
}

task<std::vector<result<void>>> attached_client::batch_put_parts(
    std::vector<std::string> keys, std::vector<std::vector<std::span<const std::byte>>> values) {
  auto r = co_await impl_->batch(true, std::move(keys), std::move(values));
  std::vector<result<void>> out;
  out.reserve(r.size());
  for (auto& x : r) out.push_back(x ? result<void>{} : result<void>(x.error()));
  co_return out;
}

task<std::vector<result<std::size_t>>> attached_client::batch_get_parts(
    std::vector<std::string> keys, std::vector<std::vector<std::span<std::byte>>> pieces) {
  auto r = co_await impl_->batch(false, std::move(keys), std::move(pieces));
  std::vector<result<std::size_t>> out;
  out.reserve(r.size());
  for (auto& x : r)
    out.push_back(x ? result<std::size_t>(static_cast<std::size_t>(*x)) : result<std::size_t>(x.error()));
  co_return out;
}

task<std::vector<result<bool>>> attached_client::batch_exists(std::vector<std::string> keys) {
  auto& p = *impl_;
  const auto n = keys.size();
  std::vector<result<bool>> out(n, error_of<bool>(make_error_code(errc::invalid_params)));
  if (p.stopped.load(std::memory_order_acquire)) {
    std::fill(out.begin(), out.end(), error_of<bool>(make_error_code(errc::shutting_down)));
    co_return out;
  }
  if (n > p.opts.max_batch_keys) co_return out;
  std::vector<task<result<void>>> work;
  for (std::size_t first = 0; first < n; first += p.max_keys) {
    auto last = std::min<std::size_t>(n, first + p.max_keys);
    work.push_back([](impl& p, const std::vector<std::string>& keys, std::size_t first, std::size_t last,
                      std::vector<result<bool>>& out) -> task<result<void>> {
      auto fail_all = [&](const boost::system::error_code& ec) {
        for (auto i = first; i < last; ++i) out[i] = error_of<bool>(ec);
        return result<void>{};
      };
      auto cap = co_await mc::rpc::connect<Attach>(p.endpoint, attach_service_name);
      if (!cap) co_return fail_all(cap.error());
      auto req = cap->batchExistsRequest();
      req.setTimeoutMs(timeout_ms(p.opts.rpc_timeout));
      auto list = req.initKeys(static_cast<unsigned>(last - first));
      for (auto i = first; i < last; ++i) list.set(static_cast<unsigned>(i - first), keys[i]);
      auto resp = co_await mc::rpc::call(req.send(), p.call_timeout());
      if (!resp) co_return fail_all(resp.error());
      auto res = resp->getResults();
      if (res.size() != last - first) co_return fail_all(make_error_code(errc::rpc_fail));
      for (auto i = first; i < last; ++i) {
        auto r = res[static_cast<unsigned>(i - first)];
        auto code = from_wire_code(r.getCode());
        out[i] = code ? result<bool>(r.getSize() != 0) : error_of<bool>(code.error());
      }
      co_return result<void>{};
    }(p, keys, first, last, out));
  }
  (void)co_await mc::when_all(std::move(work));
  co_return out;
}

task<result<void>> attached_client::remove(std::string key) {
  auto& p = *impl_;
  if (p.stopped.load(std::memory_order_acquire)) co_return fail(errc::shutting_down);
  if (auto k = check_key(key); !k) co_return k;
  auto cap = co_await mc::rpc::connect<Attach>(p.endpoint, attach_service_name);
  if (!cap) co_return cap.error();
  auto req = cap->removeRequest();
  req.setKey(key);
  req.setTimeoutMs(timeout_ms(p.opts.rpc_timeout));
  auto resp = co_await mc::rpc::call(req.send(), p.call_timeout());
  if (!resp) co_return resp.error();
  co_return from_wire_code(resp->getResult().getCode());
}

task<result<std::uint64_t>> attached_client::size_of(std::string key) {
  auto& p = *impl_;
  if (p.stopped.load(std::memory_order_acquire)) co_return fail(errc::shutting_down);
  if (auto k = check_key(key); !k) co_return k.error();
  auto cap = co_await mc::rpc::connect<Attach>(p.endpoint, attach_service_name);
  if (!cap) co_return cap.error();
  auto req = cap->sizeOfRequest();
  req.setKey(key);
  req.setTimeoutMs(timeout_ms(p.opts.rpc_timeout));
  auto resp = co_await mc::rpc::call(req.send(), p.call_timeout());
  if (!resp) co_return resp.error();
  auto r = resp->getResult();
  if (auto code = from_wire_code(r.getCode()); !code) co_return code.error();
  co_return r.getSize();
}

result<mc::transfer::region> attached_client::register_buffer(std::span<std::byte> buf) {
  // Pieces are still exposed per call (see impl::expose): on the attacher's
  // transports (TCP, same-host) a registration costs no system call.
  if (impl_->stopped.load(std::memory_order_acquire)) return fail(errc::shutting_down);
  return impl_->eng->register_memory(buf.data(), buf.size(), region_access::remote_read_write);
}

std::span<std::byte> attached_client::local_buffer() const noexcept { return {impl_->local.get(), impl_->local_size}; }

const std::string& attached_client::node_id() const noexcept { return impl_->node_id; }
const std::string& attached_client::attach_endpoint() const noexcept { return impl_->endpoint; }
std::string attached_client::transfer_endpoint() const { return impl_->eng->endpoint(); }
mc::transfer::engine& attached_client::engine() noexcept { return *impl_->eng; }

}  // namespace mc::store
