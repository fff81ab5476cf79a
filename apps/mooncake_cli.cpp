// mooncake_cli: the human entry point; itself a real peer client (it has its
// own TransferEngine so owners can WRITE into / READ from its buffers).
#include "mc/config/version.hpp"
#include "mc/master/etcd.hpp"
#include "mc/master/master_client.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client_options.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/store/peer_client.hpp"
#include "mc/transfer/engine.hpp"
#include "auth_setup.hpp"
#include "signals.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr const char* usage_text =
    "usage: mooncake_cli --master_server_address HOST:PORT [options] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  put [--target HOST:RPCPORT] [--replicas N] KEY FILE\n"
    "                                         store FILE under KEY on a node (given, or the\n"
    "                                         master's write route) via the remote-write flow;\n"
    "                                         --replicas N (1..16): on N distinct nodes (the target\n"
    "                                         and N-1 the master chooses); exit 1 with\n"
    "                                         REPLICATION_INCOMPLETE when only some copies committed\n"
    "  get KEY [OUT]                          remote-read KEY into OUT (default: stdout)\n"
    "  exists KEY                             prints yes/no (exit 0/1)\n"
    "  remove KEY                             removes KEY from every holder\n"
    "  stat KEY                               size and owners\n"
    "  clients                                registered clients: health, rpc, transfer and HTTP\n"
    "                                         endpoints, keys, usage\n"
    "\n"
    "options:\n"
    "  --version                              print \"mooncake_cli <version> (<git revision>)\" and exit\n"
    "  --master_server_address HOST:PORT      the master [127.0.0.1:50051], or etcd://H:P[,H:P...]\n"
    "                                         (the elected leader of --cluster_id)\n"
    "  --cluster_id NAME                      cluster in etcd [mooncake_cluster]\n"
    "  --rpc_timeout MS                       deadline of each RPC in milliseconds [10000]\n"
    "  --local_hostname ADDR                  address peers use to reach this CLI's TransferEngine\n"
    "                                         [127.0.0.1 if the master is on loopback, else\n"
    "                                         derived from the interfaces]\n"
    "  --transfer_transport auto|tcp          force TCP transfers [auto]\n"
    "  --protocol tcp|rdma                    transfer protocol of this CLI's TransferEngine: rdma lets\n"
    "                                         owners RDMA READ/WRITE its buffers (peers without RDMA\n"
    "                                         still use TCP); fails at startup without a usable device [tcp]\n"
    "  --device_names DEV[,DEV...]            RDMA devices of the TransferEngine and of the RDMA\n"
    "                                         control plane (e.g. mlx5_0,mlx5_1) [all]\n"
    "  --max_value_bytes N                    refuse larger values [4294967296]\n"
    "  --auth_token TOKEN[,PREVIOUS]          shared secret presented to the master and the nodes when\n"
    "                                         they run with one (visible in /proc/PID/cmdline: prefer\n"
    "                                         --auth_token_file or MC_AUTH_TOKEN) [off]\n"
    "  --auth_token_file FILE                 read the token from FILE (whitespace trimmed; mode 0600)\n"
    "  --etcd_username USER                   etcd:// only: authenticate to etcd as USER\n"
    "  --etcd_password_file FILE              etcd:// only: USER's password (whitespace trimmed)\n"
    "  --etcd_ca_file FILE                    etcd:// only: TLS to etcd, its certificate checked\n"
    "                                         against these PEM CAs (https:// endpoints: TLS with the\n"
    "                                         system's CAs)\n"
    "  --etcd_cert_file FILE, --etcd_key_file FILE\n"
    "                                         etcd:// only: TLS client certificate and its key\n"
    "\n"
    "environment:\n"
    "  MC_AUTH_TOKEN, MC_AUTH_TOKEN_FILE      as --auth_token, --auth_token_file (flags win)\n"
    "  MC_ETCD_USERNAME, MC_ETCD_PASSWORD_FILE, MC_ETCD_CA_FILE, MC_ETCD_CERT_FILE, MC_ETCD_KEY_FILE\n"
    "                                         as the --etcd_* flags (flags win)\n"
    "  MC_RPC_PROTOCOL tcp|rdma               control-plane transport of this CLI's RPCs: rdma carries\n"
    "                                         Cap'n Proto over RDMA SEND/RECV on the first usable\n"
    "                                         device of --device_names (a server without it: TCP) [tcp]\n"
    "\n"
    "exit status: 0 success, 1 missing key or failed operation (error name on stderr), 2 usage or\n"
    "startup error (bad option, no usable RDMA device, bad MC_RPC_PROTOCOL, bad auth token or file);\n"
    "a refused auth token is ACCESS_DENIED with exit status 1\n";

struct cli_options {
  std::string master = "127.0.0.1:50051";
  std::string cluster_id = "mooncake_cluster";
  std::chrono::milliseconds timeout{10000};
  std::string local_hostname;
  std::string transport = "auto";
  std::string protocol = "tcp";
  std::vector<std::string> device_names;
  std::uint64_t max_value = 4ull << 30;
  std::string target;
  std::uint32_t replicas = 1;
  mc::config::auth_options auth;
  mc::master::etcd_security_options etcd;
  std::vector<std::string> words;  // command and its arguments
};

int usage_error(const std::string& msg) {
  std::cerr << "mooncake_cli: " << msg << "\n(see mooncake_cli --help)\n";
  return 2;
}

int op_error(const boost::system::error_code& ec, const std::string& what) {
  std::cerr << "mooncake_cli: " << what << ": " << mc::error_name(mc::to_errc(ec)) << " (" << ec.message() << ")\n";
  if (mc::to_errc(ec) == mc::errc::access_denied && !mc::rpc::last_error_message().empty())
    std::cerr << "mooncake_cli: " << mc::rpc::last_error_message() << "\n";
  return 1;
}

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Returns nullopt on success, else an exit code.
std::optional<int> parse(int argc, char** argv, cli_options& o) {
  // The environment first: flags override it.
  if (const char* e = std::getenv("MC_AUTH_TOKEN"); e && *e) o.auth.token = e;
  if (const char* e = std::getenv("MC_AUTH_TOKEN_FILE"); e && *e) o.auth.token_file = e;
  if (const char* e = std::getenv("MC_ETCD_USERNAME"); e && *e) o.etcd.username = e;
  if (const char* e = std::getenv("MC_ETCD_PASSWORD_FILE"); e && *e) o.etcd.password_file = e;
  if (const char* e = std::getenv("MC_ETCD_CA_FILE"); e && *e) o.etcd.ca_file = e;
  if (const char* e = std::getenv("MC_ETCD_CERT_FILE"); e && *e) o.etcd.cert_file = e;
  if (const char* e = std::getenv("MC_ETCD_KEY_FILE"); e && *e) o.etcd.key_file = e;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage_text;
      return 0;
    }
    if (a == "--version") {
      std::cout << mc::config::version_line("mooncake_cli") << "\n";
      return 0;
    }
    if (a.rfind("--", 0) != 0) {
      o.words.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= argc) return usage_error("option --" + name + " needs a value");
      value = argv[++i];
    }
    try {
      if (name == "master_server_address")
        o.master = value;
      else if (name == "cluster_id")
        o.cluster_id = value;
      else if (name == "rpc_timeout")
        o.timeout = std::chrono::milliseconds(std::stoull(value));
      else if (name == "local_hostname")
        o.local_hostname = value;
      else if (name == "transfer_transport")
        o.transport = value;
      else if (name == "max_value_bytes")
        o.max_value = std::stoull(value);
      else if (name == "target")
        o.target = value;
      else if (name == "replicas") {
        auto n = std::stoull(value);
        if (n == 0 || n > mc::master::replication::max_copies) throw std::invalid_argument("replicas");
        o.replicas = static_cast<std::uint32_t>(n);
      } else if (name == "protocol")
        o.protocol = value;
      else if (name == "device_names")
        o.device_names = split_list(value);
      else if (name == "auth_token")
        o.auth.token = value, o.auth.token_file.clear();
      else if (name == "auth_token_file")
        o.auth.token_file = value, o.auth.token.clear();
      else if (name == "etcd_username")
        o.etcd.username = value;
      else if (name == "etcd_password_file")
        o.etcd.password_file = value;
      else if (name == "etcd_ca_file")
        o.etcd.ca_file = value;
      else if (name == "etcd_cert_file")
        o.etcd.cert_file = value;
      else if (name == "etcd_key_file")
        o.etcd.key_file = value;
      else
        return usage_error("unknown option --" + name);
    } catch (const std::exception&) {
      return usage_error("invalid value '" + value + "' for --" + name);
    }
  }
  if (o.words.empty()) return usage_error("no command given");
  if (o.transport != "auto" && o.transport != "tcp") return usage_error("--transfer_transport must be auto or tcp");
  if (o.protocol != "tcp" && o.protocol != "rdma") return usage_error("--protocol must be tcp or rdma");
  if (o.master.starts_with("etcd://")) {
    bool tls = false;
    std::string why;
    if (mc::master::parse_etcd_endpoints(o.master, nullptr, &tls) &&
        !mc::master::etcd_security::load(o.etcd, tls, &why))
      return usage_error(why);
  }
  return std::nullopt;
}

struct session {
  mc::runtime::runtime& rt;
  cli_options& o;
  mc::transfer::engine& engine;
  mc::master::master_client master{o.master, o.timeout, o.cluster_id, mc::master::membership_lease_ttl, o.etcd};
  mc::store::peer_client peers{o.timeout};

  mc::task<int> put() {
    if (o.words.size() != 3) co_return usage_error("put needs KEY FILE");
    const auto& key = o.words[1];
    if (!mc::store::check_key(key)) co_return usage_error("invalid key");
    std::ifstream in(o.words[2], std::ios::binary | std::ios::ate);
    if (!in) co_return usage_error("cannot read " + o.words[2]);
    auto size = static_cast<std::uint64_t>(in.tellg());
    if (size == 0) co_return usage_error(o.words[2] + " is empty (values must have at least one byte)");
    if (size > o.max_value) co_return op_error(mc::fail(mc::errc::too_large), "put " + key);
    std::vector<std::byte> buf(size);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(size));
    if (o.replicas > 1) co_return co_await put_replicated(key, buf);
    std::string target = o.target;
    if (target.empty()) {
      auto r = co_await master.write_route(size);
      if (!r) co_return op_error(r.error(), "write route for " + key);
      target = r->rpc_endpoint;
    }
    auto region = engine.register_memory(buf.data(), buf.size());
    if (!region) co_return op_error(region.error(), "register buffer");
    auto r = co_await peers.write_remote(target, key, region->describe());
    if (!r) co_return op_error(r.error(), "put " + key + " on " + target);
    std::cerr << "stored " << size << " bytes under '" << key << "' on " << target << "\n";
    co_return 0;
  }

  /// put --replicas N: the target (if given) and nodes the master chooses,
  /// each sent the value with the copies' replication tag.
  mc::task<int> put_replicated(const std::string& key, std::vector<std::byte>& buf) {
    std::vector<std::string> homes;
    if (!o.target.empty()) homes.push_back(o.target);
    std::vector<std::string> exclude;
    auto routes = co_await master.write_routes(buf.size(), o.replicas, std::move(exclude));
    if (!routes && homes.empty()) co_return op_error(routes.error(), "write routes for " + key);
    if (routes)
      for (auto& r : *routes)
        if (r.rpc_endpoint != o.target && homes.size() < o.replicas) homes.push_back(r.rpc_endpoint);
    std::random_device rd;
    const std::uint64_t group = ((static_cast<std::uint64_t>(rd()) << 32) | rd()) >> 8 | 1;
    const auto tag = mc::master::replication{group, o.replicas}.tag();
    std::uint32_t ok = 0;
    boost::system::error_code last = mc::make_error_code(mc::errc::no_available_handle);
    for (auto& home : homes) {
      // A registration per copy: revoked when that owner's answer is in.
      auto region = engine.register_memory(buf.data(), buf.size());
      if (!region) co_return op_error(region.error(), "register buffer");
      std::vector<mc::store::peer_write> one(1);
      one[0].key = key;
      one[0].src.push_back(region->describe());
      one[0].replication = tag;
      auto r = co_await peers.write_batch(home, std::move(one));
      auto res = r ? std::move(r->front()) : mc::result<void>(r.error());
      if (res) {
        ++ok;
        std::cerr << "stored " << buf.size() << " bytes under '" << key << "' on " << home << "\n";
      } else {
        last = res.error();
        std::cerr << "mooncake_cli: copy on " << home << " failed: " << mc::error_name(mc::to_errc(last)) << "\n";
      }
    }
    if (ok == o.replicas) co_return 0;
    if (ok > 0) {
      std::string what = "put " + key;
      what += " (";
      what += std::to_string(ok);
      what += " of ";
      what += std::to_string(o.replicas);
      what += " copies)";
      co_return op_error(mc::fail(mc::errc::replication_incomplete), what);
    }
    co_return op_error(last, "put " + key);
  }

  mc::task<int> get() {
    if (o.words.size() < 2 || o.words.size() > 3) co_return usage_error("get needs KEY [OUT]");
    const auto& key = o.words[1];
    auto info = co_await master.lookup(key);
    if (!info) co_return op_error(info.error(), "get " + key);
    if (info->size > o.max_value) co_return op_error(mc::fail(mc::errc::too_large), "get " + key);
    std::vector<std::byte> buf(info->size);
    boost::system::error_code last = mc::make_error_code(mc::errc::object_not_found);
    bool ok = false;
    for (auto& rep : info->replicas) {
      auto region = engine.register_memory(buf.data(), buf.size());
      if (!region) co_return op_error(region.error(), "register buffer");
      auto r = co_await peers.read_remote(rep.rpc_endpoint, key, region->describe());
      if (r.value) {
        ok = true;
        break;
      }
      last = r.value.error();
      std::cerr << "mooncake_cli: replica " << rep.client_id << " failed: " << mc::error_name(mc::to_errc(last))
                << "\n";
    }
    if (!ok) co_return op_error(last, "get " + key);
    if (o.words.size() == 3) {
      std::ofstream out(o.words[2], std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
      if (!out) co_return op_error(mc::fail(mc::errc::io_error), "write " + o.words[2]);
    } else {
      std::fwrite(buf.data(), 1, buf.size(), stdout);
      std::fflush(stdout);
    }
    co_return 0;
  }

  mc::task<int> exists() {
    if (o.words.size() != 2) co_return usage_error("exists needs KEY");
    auto r = co_await master.lookup(o.words[1]);
    if (r) {
      std::cout << "yes\n";
      co_return 0;
    }
    if (mc::is(r.error(), mc::errc::object_not_found)) {
      std::cout << "no\n";
      co_return 1;
    }
    co_return op_error(r.error(), "exists " + o.words[1]);
  }

  mc::task<int> remove() {
    if (o.words.size() != 2) co_return usage_error("remove needs KEY");
    const auto& key = o.words[1];
    auto holders = co_await master.remove_key(key);
    if (!holders) co_return op_error(holders.error(), "remove " + key);
    int rc = 0;
    for (auto& h : *holders) {
      auto r = co_await peers.remove(h.rpc_endpoint, key);
      if (!r && !mc::is(r.error(), mc::errc::object_not_found)) rc = op_error(r.error(), "remove on " + h.client_id);
    }
    co_return rc;
  }

  mc::task<int> stat() {
    if (o.words.size() != 2) co_return usage_error("stat needs KEY");
    auto r = co_await master.lookup(o.words[1]);
    if (!r) co_return op_error(r.error(), "stat " + o.words[1]);
    std::cout << "key: " << o.words[1] << "\nsize: " << r->size << "\n";
    for (auto& rep : r->replicas)
      std::cout << "owner: " << rep.client_id << " rpc=" << rep.rpc_endpoint << " transfer=" << rep.transfer_endpoint
                << "\n";
    co_return 0;
  }

  mc::task<int> clients() {
    if (o.words.size() != 1) co_return usage_error("clients takes no argument");
    auto r = co_await master.clients();
    if (!r) co_return op_error(r.error(), "clients");
    std::printf("%-24s %-8s %-22s %-22s %-22s %10s %14s %14s\n", "client", "health", "rpc", "transfer", "http", "keys",
                "used", "capacity");
    for (auto& c : *r)
      std::printf("%-24s %-8s %-22s %-22s %-22s %10llu %14llu %14llu\n", c.info.client_id.c_str(),
                  std::string(mc::master::health_name(c.state)).c_str(), c.info.rpc_endpoint.c_str(),
                  c.info.transfer_endpoint.c_str(), c.info.http_endpoint.empty() ? "-" : c.info.http_endpoint.c_str(),
                  static_cast<unsigned long long>(c.keys), static_cast<unsigned long long>(c.info.used),
                  static_cast<unsigned long long>(c.info.capacity));
    co_return 0;
  }

  mc::task<int> run() {
    const auto& cmd = o.words[0];
    if (cmd == "put") co_return co_await put();
    if (cmd == "get") co_return co_await get();
    if (cmd == "exists") co_return co_await exists();
    if (cmd == "remove") co_return co_await remove();
    if (cmd == "stat") co_return co_await stat();
    if (cmd == "clients") co_return co_await clients();
    co_return usage_error("unknown command '" + cmd + "'");
  }
};

}  // namespace

int main(int argc, char** argv) {
  mc::apps::block_stop_signals();
  cli_options o;
  if (auto rc = parse(argc, argv, o)) return *rc;
  std::vector<std::string> tokens;
  if (auto err = mc::apps::apply_auth(o.auth, "mooncake_cli", &tokens); !err.empty()) {
    std::cerr << "mooncake_cli: " << err << "\n";
    return 2;
  }
  // MC_RPC_PROTOCOL: tcp, or rdma (opens the RDMA device now: a clear error when there is none).
  if (auto err = mc::rpc::use_protocol_from_env(o.device_names); !err.empty()) {
    std::cerr << "mooncake_cli: " << err << "\n";
    return 2;
  }
  mc::runtime::runtime rt(1);
  rt.start();
  int rc = 1;
  {
    mc::transfer::engine_options eo;
    eo.port = 0;
    eo.advertise_host = o.local_hostname;
    auto master_host = o.master;
    if (auto eps = mc::master::parse_etcd_endpoints(o.master); o.master.starts_with("etcd://") && eps)
      master_host = eps->front();
    if (eo.advertise_host.empty() && mc::store::is_loopback_endpoint(master_host)) eo.advertise_host = "127.0.0.1";
    if (o.transport == "tcp") eo.force = mc::transfer::transport_kind::tcp;
    eo.protocol = o.protocol;
    eo.device_names = o.device_names;
    std::unique_ptr<mc::transfer::engine> engine;
    try {
      engine = std::make_unique<mc::transfer::engine>(rt, eo);
    } catch (const std::exception& e) {  // startup error: no device, no verbs in this build
      std::cerr << "mooncake_cli: transfer engine: " << e.what() << "\n";
      rc = 2;
    }
    if (engine) {
      if (auto r = engine->start(); !r) {
        rc = op_error(r.error(), "transfer engine");
      } else {
        session s{rt, o, *engine};
        rc = rt.block_on(s.run());
        engine->stop();
      }
    }
  }
  mc::rpc::shutdown(rt);
  rt.stop();
  return rc;
}
