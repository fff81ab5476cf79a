// The extension module `mooncake_p2p._native`: MooncakeDistributedStore with
// Mooncake's method names, arguments and return values (store_py.cpp of
// kvcache-ai/Mooncake at 3b5a594133958449a1feaf1c9e0fc1b553e34a28).
#include "prepared.hpp"
#include "types.hpp"

#include "mc/config/version.hpp"

#include <pybind11/stl.h>

#include <cstdio>
#include <optional>

namespace mc::python {

namespace {

/// The Python object: a session that setup() fills and close() empties.
struct store {
  std::shared_ptr<store_session> s = std::make_shared<store_session>();
};

using kv_list = std::vector<std::pair<std::string, std::string>>;

int do_setup(store& st, const kv_list& kv) {
  std::string why;
  auto cfg = parse_setup(kv, &why);
  if (!cfg) {
    std::fprintf(stderr, "mooncake_p2p: setup: %s\n", why.c_str());
    return not_ready;
  }
  int rc;
  {
    py::gil_scoped_release release;
    rc = st.s->setup(std::move(*cfg), &why);
  }
  if (rc != 0) std::fprintf(stderr, "mooncake_p2p: setup failed (%d): %s\n", rc, why.c_str());
  return rc;
}

kv_list dict_items(const py::dict& d) {
  kv_list kv;
  for (auto item : d) {
    std::string k = py::str(item.first);
    std::string v = py::str(item.second);
    kv.emplace_back(std::move(k), std::move(v));
  }
  return kv;
}

// ---- Argument conversion ------------------------------------------------------

/// Read-only views of Python bytes-like objects, kept alive with the call.
struct views {
  std::vector<py::buffer_info> infos;
  std::vector<std::span<const std::byte>> spans;
  bool ok = true;
  /// Any C-contiguous buffer (bytes, bytearray, memoryview, numpy arrays);
  /// its bytes in memory order. Others mark the call invalid.
  void add(const py::handle& obj) {
    auto info = py::reinterpret_borrow<py::buffer>(obj).request(false);
    py::ssize_t expect = info.itemsize;
    for (auto d = info.ndim; d-- > 0;) {
      if (info.shape[d] > 1 && info.strides[d] != expect) ok = false;
      expect *= info.shape[d];
    }
    spans.emplace_back(static_cast<const std::byte*>(info.ptr), static_cast<std::size_t>(info.size * info.itemsize));
    infos.push_back(std::move(info));
  }
};

std::vector<raw_span> raw(const std::vector<std::uintptr_t>& ptrs, const std::vector<std::size_t>& sizes) {
  std::vector<raw_span> out;
  for (std::size_t i = 0; i < ptrs.size() && i < sizes.size(); ++i) out.push_back({ptrs[i], sizes[i]});
  return out;
}

std::vector<std::span<const std::byte>> const_pieces(const std::vector<std::span<std::byte>>& v) {
  return {v.begin(), v.end()};
}

py::object run(store& st, prepared p);
py::object start(store& st, prepared p, std::shared_ptr<completion_queue> q, std::uint64_t id);

template <class T>
std::function<py::object()> value_of(std::shared_ptr<T> out) {
  return [out] { return py::cast(*out); };
}

template <class T>
std::function<py::object()> constant(T v) {
  return [v] { return py::cast(v); };
}

// ---- The calls, prepared once for the sync and the async form ------------------

using cfg_t = const replicate_config&;

prepared rejected(std::function<py::object()> why) { return {nullptr, nullptr, std::move(why)}; }

/// A put's mode from Mooncake's arguments: ReplicateConfig.replica_num is the
/// number of copies (0 or above the limit: the put fails with INVALID_PARAMS).
put_how how_of(bool upsert, cfg_t cfg) {
  put_how h;
  h.upsert = upsert;
  h.replicas = static_cast<std::uint32_t>(std::min<std::size_t>(cfg.replica_num, 1u << 16));
  return h;
}

prepared put_pieces(store& st, std::string key, std::vector<std::span<const std::byte>> pieces,
                    std::shared_ptr<views> keep, put_how how) {
  if ((keep && !keep->ok) || pieces.empty()) return rejected(constant(static_cast<int>(errc::invalid_params)));
  auto out = std::make_shared<int>(not_ready);
  auto s = st.s;
  return {[s, key = std::move(key), pieces = std::move(pieces), how, out](store_session::node& n) {
            return assign(s->op_put_parts(n, key, pieces, how), out);
          },
          [out, keep] { return py::cast(*out); }, constant(not_ready)};
}

prepared put_buffer(store& st, std::string key, const py::buffer& value, put_how how) {
  auto vs = std::make_shared<views>();
  vs->add(value);
  auto spans = vs->spans;
  return put_pieces(st, std::move(key), std::move(spans), vs, how);
}

prepared put_from(store& st, std::string key, std::uintptr_t ptr, std::size_t size, put_how how) {
  auto pieces = store_session::pieces_of({{ptr, size}});
  if (!pieces || size == 0) return rejected(constant(static_cast<int>(errc::invalid_params)));
  return put_pieces(st, std::move(key), const_pieces(*pieces), nullptr, how);
}

/// Batch puts: values[i] are key i's pieces. Mismatched counts fail every key;
/// `one_code`: the call answers one code (0 or the first error), as
/// Mooncake's put_batch does.
prepared batch_put(store& st, std::vector<std::string> keys,
                   std::vector<std::vector<std::span<const std::byte>>> values, std::shared_ptr<views> keep,
                   put_how how, bool one_code) {
  auto n_keys = keys.size();
  auto codes = [n_keys, one_code](int c) -> std::function<py::object()> {
    if (one_code) return constant(c);
    return constant(std::vector<int>(n_keys, c));
  };
  if (keys.size() != values.size() || (keep && !keep->ok))
    return rejected(codes(static_cast<int>(errc::invalid_params)));
  auto out = std::make_shared<std::vector<int>>(n_keys, not_ready);
  auto s = st.s;
  return {[s, keys = std::move(keys), values = std::move(values), how, out](store_session::node& n) {
            return assign(s->op_batch_put_parts(n, keys, values, how), out);
          },
          [out, keep, one_code]() -> py::object {
            if (!one_code) return py::cast(*out);
            for (int c : *out)
              if (c != 0) return py::cast(c);
            return py::cast(0);
          },
          codes(not_ready)};
}

prepared batch_put_buffers(store& st, std::vector<std::string> keys, const std::vector<py::buffer>& values,
                           put_how how) {
  auto vs = std::make_shared<views>();
  std::vector<std::vector<std::span<const std::byte>>> pieces;
  for (auto& v : values) {
    vs->add(v);
    pieces.push_back({vs->spans.back()});
  }
  return batch_put(st, std::move(keys), std::move(pieces), vs, how, true);
}

/// Pointer lists -> pieces per key; nullopt when the counts do not line up or
/// an address range is invalid.
template <class Span>
std::optional<std::vector<std::vector<Span>>> pointer_pieces(const std::vector<std::vector<std::uintptr_t>>& ptrs,
                                                             const std::vector<std::vector<std::size_t>>& sizes) {
  if (ptrs.size() != sizes.size()) return std::nullopt;
  std::vector<std::vector<Span>> out;
  out.reserve(ptrs.size());
  for (std::size_t i = 0; i < ptrs.size(); ++i) {
    if (ptrs[i].size() != sizes[i].size()) return std::nullopt;
    auto p = store_session::pieces_of(raw(ptrs[i], sizes[i]));
    if (!p) return std::nullopt;
    out.emplace_back(p->begin(), p->end());
  }
  return out;
}

/// One piece per key.
template <class T>
std::vector<std::vector<T>> singles(const std::vector<T>& v) {
  std::vector<std::vector<T>> out;
  out.reserve(v.size());
  for (auto p : v) out.push_back({p});
  return out;
}

prepared batch_put_pointers(store& st, std::vector<std::string> keys,
                            const std::vector<std::vector<std::uintptr_t>>& ptrs,
                            const std::vector<std::vector<std::size_t>>& sizes, put_how how) {
  auto pieces = pointer_pieces<std::span<const std::byte>>(ptrs, sizes);
  if (!pieces || pieces->size() != keys.size())
    return rejected(constant(std::vector<int>(keys.size(), static_cast<int>(errc::invalid_params))));
  return batch_put(st, std::move(keys), std::move(*pieces), nullptr, how, false);
}

/// Reads into caller memory; `as_int`: results as int (Mooncake's
/// batch_get_into_multi_buffers) instead of int64.
prepared batch_get_pointers(store& st, std::vector<std::string> keys,
                            const std::vector<std::vector<std::uintptr_t>>& ptrs,
                            const std::vector<std::vector<std::size_t>>& sizes, bool as_int) {
  auto n_keys = keys.size();
  auto codes = [n_keys, as_int](std::int64_t c) -> std::function<py::object()> {
    if (as_int) return constant(std::vector<int>(n_keys, static_cast<int>(c)));
    return constant(std::vector<std::int64_t>(n_keys, c));
  };
  auto pieces = pointer_pieces<std::span<std::byte>>(ptrs, sizes);
  if (!pieces || pieces->size() != n_keys) return rejected(codes(static_cast<int>(errc::invalid_params)));
  auto out = std::make_shared<std::vector<std::int64_t>>(n_keys, not_ready);
  auto s = st.s;
  return {[s, keys = std::move(keys), pieces = std::move(*pieces), out](store_session::node& n) {
            return assign(s->op_batch_get_parts(n, keys, pieces), out);
          },
          [out, as_int]() -> py::object {
            if (!as_int) return py::cast(*out);
            return py::cast(std::vector<int>(out->begin(), out->end()));
          },
          codes(not_ready)};
}

prepared get_into(store& st, std::string key, std::uintptr_t ptr, std::size_t size) {
  auto pieces = store_session::pieces_of({{ptr, size}});
  if (!pieces) return rejected(constant(std::int64_t{static_cast<int>(errc::invalid_params)}));
  auto out = std::make_shared<std::int64_t>(not_ready);
  auto s = st.s;
  return {[s, key = std::move(key), p = std::move(*pieces), out](store_session::node& n) {
            return assign(s->op_get_parts(n, key, p), out);
          },
          value_of(out), constant(std::int64_t{not_ready})};
}

/// Whole values into new memory: bytes (get / get_batch; b"" when missing) or
/// BufferHandle (get_buffer / batch_get_buffer; None when missing).
prepared get_owned(store& st, std::vector<std::string> keys, bool as_bytes, bool single) {
  using outcome = std::vector<result<owned_buffer>>;
  auto out = std::make_shared<outcome>();
  auto s = st.s;
  auto convert = [as_bytes](result<owned_buffer>& r) -> py::object {
    if (!r) return as_bytes ? py::object(py::bytes("", 0)) : py::object(py::none());
    if (as_bytes) return py::bytes(reinterpret_cast<const char*>(r->data.get()), r->size);
    return py::cast(buffer_handle{std::move(*r)});
  };
  auto n_keys = keys.size();
  auto unusable = [as_bytes, single, n_keys]() -> py::object {
    py::object one = as_bytes ? py::object(py::bytes("", 0)) : py::object(py::none());
    if (single) return one;
    py::list l;
    for (std::size_t i = 0; i < n_keys; ++i) l.append(one);
    return l;
  };
  return {
      [s, keys = std::move(keys), out](store_session::node& n) { return assign(s->op_batch_get_owned(n, keys), out); },
      [out, convert, single]() -> py::object {
        if (single) return out->empty() ? py::object(py::none()) : convert((*out)[0]);
        py::list l;
        for (auto& r : *out) l.append(convert(r));
        return l;
      },
      unusable};
}

template <class T, class Op>
prepared simple(store& st, Op op, std::function<py::object()> unusable) {
  auto out = std::make_shared<T>();
  auto s = st.s;
  return {[s, out, op](store_session::node& n) { return assign(op(*s, n), out); }, value_of(out), std::move(unusable)};
}

// ---- Binding helpers --------------------------------------------------------------

using store_class = py::class_<store>;

/// Binds `name(args...)` (synchronous) and `_async_name(queue, id, args...)`
/// (the asyncio bridge's form: returns (started, op-or-result)).
template <class... A, class F, class... Extra>
void def_both(store_class& c, const char* name, F prep, const Extra&... extra) {
  c.def(
      name, [prep](store& st, A... a) { return run(st, prep(st, std::forward<A>(a)...)); }, extra...);
  std::string an = std::string("_async_") + name;
  c.def(
      an.c_str(),
      [prep](store& st, std::shared_ptr<completion_queue> q, std::uint64_t id, A... a) {
        return start(st, prep(st, std::forward<A>(a)...), std::move(q), id);
      },
      py::arg("_queue"), py::arg("_id"), extra...);
}

py::object run(store& st, prepared p) {
  if (!p.make) return p.unusable();  // rejected before reaching the node
  return run_sync(*st.s, p);
}

/// The asyncio form of run(): (true, the operation) once started, else
/// (false, the result the synchronous call would have returned).
py::object start(store& st, prepared p, std::shared_ptr<completion_queue> q, std::uint64_t id) {
  if (!p.make) return py::make_tuple(false, p.unusable());
  auto op = run_async(*st.s, p, std::move(q), id);
  if (op.is_none()) return py::make_tuple(false, p.unusable());
  return py::make_tuple(true, op);
}

void bind_lifecycle(store_class& c) {
  c.def(py::init<>())
      .def(
          "setup",
          [](store& st, const std::string& local_hostname, const std::string& metadata_server,
             std::size_t global_segment_size, std::size_t local_buffer_size, const std::string& protocol,
             const std::string& rdma_devices, const std::string& master_server_addr, const py::object& engine,
             bool enable_ssd_offload, const std::string& ssd_offload_path, const std::string& tenant_id,
             bool enable_client_http_server, int client_http_port) {
            kv_list kv = {{"local_hostname", local_hostname},
                          {"metadata_server", metadata_server},
                          {"global_segment_size", std::to_string(global_segment_size)},
                          {"local_buffer_size", std::to_string(local_buffer_size)},
                          {"protocol", protocol},
                          {"rdma_devices", rdma_devices},
                          {"master_server_addr", master_server_addr},
                          {"engine", engine.is_none() ? "None" : "object"},
                          {"enable_ssd_offload", enable_ssd_offload ? "true" : "false"},
                          {"ssd_offload_path", ssd_offload_path},
                          {"tenant_id", tenant_id},
                          {"enable_client_http_server", enable_client_http_server ? "true" : "false"},
                          {"client_http_port", std::to_string(client_http_port)}};
            return do_setup(st, kv);
          },
          py::arg("local_hostname"), py::arg("metadata_server"), py::arg("global_segment_size"),
          py::arg("local_buffer_size"), py::arg("protocol"), py::arg("rdma_devices"), py::arg("master_server_addr"),
          py::arg("engine") = py::none(), py::arg("enable_ssd_offload") = false, py::arg("ssd_offload_path") = "",
          py::arg("tenant_id") = "default", py::arg("enable_client_http_server") = false,
          py::arg("client_http_port") = 9300)
      .def(
          "setup", [](store& st, const py::dict& config) { return do_setup(st, dict_items(config)); },
          py::arg("config"))
      .def(
          "setup_p2p_real_client", [](store& st, const py::dict& config) { return do_setup(st, dict_items(config)); },
          py::arg("config"))
      .def(
          "setup_dummy",
          [](store& st, std::size_t mem_pool_size, std::size_t local_buffer_size, const std::string& server_address) {
            // mem_pool_size: Mooncake's pool the real client maps; here the
            // node's tiers hold the values, so it only has to be sane.
            (void)mem_pool_size;
            std::string why;
            int rc;
            {
              py::gil_scoped_release release;
              rc = st.s->setup_dummy(local_buffer_size, server_address, &why);
            }
            if (rc != 0) std::fprintf(stderr, "mooncake_p2p: setup_dummy failed (%d): %s\n", rc, why.c_str());
            return rc;
          },
          py::arg("mem_pool_size"), py::arg("local_buffer_size"), py::arg("server_address"))
      .def("close",
           [](store& st) {
             py::gil_scoped_release release;
             return st.s->close();
           })
      .def("health_check",
           [](store& st) {
             py::gil_scoped_release release;
             return st.s->health_check();
           })
      .def("get_hostname", [](store& st) { return st.s->hostname(); })
      .def(
          "register_buffer",
          [](store& st, std::uintptr_t ptr, std::size_t size) {
            py::gil_scoped_release release;
            return st.s->register_buffer(ptr, size);
          },
          py::arg("buffer_ptr"), py::arg("size"))
      .def(
          "unregister_buffer",
          [](store& st, std::uintptr_t ptr) {
            py::gil_scoped_release release;
            return st.s->unregister_buffer(ptr);
          },
          py::arg("buffer_ptr"));
}

/// put_parts(key, *parts, config) / upsert_parts: the parts are positional.
void def_parts(store_class& c, const char* name, bool upsert) {
  auto prep = [upsert](store& st, const std::string& key, const py::args& parts, cfg_t cfg) {
    auto vs = std::make_shared<views>();
    for (auto& obj : parts) vs->add(obj);
    auto spans = vs->spans;
    return put_pieces(st, key, std::move(spans), vs, how_of(upsert, cfg));
  };
  c.def(
      name,
      [prep](store& st, const std::string& key, py::args parts, cfg_t cfg) {
        return run(st, prep(st, key, parts, cfg));
      },
      py::arg("key"), py::kw_only(), py::arg("config") = replicate_config{});
  std::string an = std::string("_async_") + name;
  c.def(
      an.c_str(),
      [prep](store& st, std::shared_ptr<completion_queue> q, std::uint64_t id, const std::string& key, py::args parts,
             cfg_t cfg) { return start(st, prep(st, key, parts, cfg), std::move(q), id); },
      py::arg("_queue"), py::arg("_id"), py::arg("key"), py::kw_only(), py::arg("config") = replicate_config{});
}

void bind_data(store_class& c) {
  using ptrs = const std::vector<std::uintptr_t>&;
  using sizes = const std::vector<std::size_t>&;
  using ptrs2 = const std::vector<std::vector<std::uintptr_t>>&;
  using sizes2 = const std::vector<std::vector<std::size_t>>&;
  using keys_t = const std::vector<std::string>&;
  using key_t = const std::string&;
  auto cfg = py::arg("config") = replicate_config{};
  for (bool up : {false, true}) {
    def_both<key_t, const py::buffer&, cfg_t>(
        c, up ? "upsert" : "put",
        [up](store& st, key_t k, const py::buffer& v, cfg_t cfg) { return put_buffer(st, k, v, how_of(up, cfg)); },
        py::arg("key"), py::arg("value"), cfg);
    def_both<keys_t, const std::vector<py::buffer>&, cfg_t>(
        c, up ? "upsert_batch" : "put_batch",
        [up](store& st, keys_t k, const std::vector<py::buffer>& v, cfg_t cfg) {
          return batch_put_buffers(st, k, v, how_of(up, cfg));
        },
        py::arg("keys"), py::arg("values"), cfg);
    def_both<key_t, std::uintptr_t, std::size_t, cfg_t>(
        c, up ? "upsert_from" : "put_from",
        [up](store& st, key_t k, std::uintptr_t p, std::size_t n, cfg_t cfg) {
          return put_from(st, k, p, n, how_of(up, cfg));
        },
        py::arg("key"), py::arg("buffer_ptr"), py::arg("size"), cfg);
    def_both<keys_t, ptrs, sizes, cfg_t>(
        c, up ? "batch_upsert_from" : "batch_put_from",
        [up](store& st, keys_t k, ptrs p, sizes n, cfg_t cfg) {
          if (p.size() != k.size() || n.size() != k.size())
            return rejected(constant(std::vector<int>(k.size(), static_cast<int>(errc::invalid_params))));
          return batch_put_pointers(st, k, singles(p), singles(n), how_of(up, cfg));
        },
        py::arg("keys"), py::arg("buffer_ptrs"), py::arg("sizes"), cfg);
    def_both<keys_t, ptrs2, sizes2, cfg_t>(
        c, up ? "batch_upsert_from_multi_buffers" : "batch_put_from_multi_buffers",
        [up](store& st, keys_t k, ptrs2 p, sizes2 n, cfg_t cfg) {
          return batch_put_pointers(st, k, p, n, how_of(up, cfg));
        },
        py::arg("keys"), py::arg("all_buffer_ptrs"), py::arg("all_sizes"), cfg);
    def_parts(c, up ? "upsert_parts" : "put_parts", up);
  }
  def_both<key_t, std::uintptr_t, std::size_t>(
      c, "get_into", [](store& st, key_t k, std::uintptr_t p, std::size_t n) { return get_into(st, k, p, n); },
      py::arg("key"), py::arg("buffer_ptr"), py::arg("size"));
  def_both<keys_t, ptrs, sizes>(
      c, "batch_get_into",
      [](store& st, keys_t k, ptrs p, sizes n) {
        if (p.size() != k.size() || n.size() != k.size())
          return rejected(constant(std::vector<std::int64_t>(k.size(), static_cast<int>(errc::invalid_params))));
        return batch_get_pointers(st, k, singles(p), singles(n), false);
      },
      py::arg("keys"), py::arg("buffer_ptrs"), py::arg("sizes"));
  def_both<keys_t, ptrs2, sizes2, bool>(
      c, "batch_get_into_multi_buffers",
      [](store& st, keys_t k, ptrs2 p, sizes2 n, bool) { return batch_get_pointers(st, k, p, n, true); },
      py::arg("keys"), py::arg("all_buffer_ptrs"), py::arg("all_sizes"), py::arg("prefer_alloc_in_same_node") = false);
  def_both<key_t>(
      c, "get", [](store& st, key_t k) { return get_owned(st, {k}, true, true); }, py::arg("key"));
  def_both<keys_t>(
      c, "get_batch", [](store& st, keys_t k) { return get_owned(st, k, true, false); }, py::arg("keys"));
  def_both<key_t>(
      c, "get_buffer", [](store& st, key_t k) { return get_owned(st, {k}, false, true); }, py::arg("key"));
  def_both<keys_t>(
      c, "batch_get_buffer", [](store& st, keys_t k) { return get_owned(st, k, false, false); }, py::arg("keys"));
  def_both<keys_t>(
      c, "batch_is_exist",
      [](store& st, keys_t k) {
        return simple<std::vector<int>>(
            st, [k](store_session& s, store_session::node& n) { return s.op_batch_exists(n, k); },
            constant(std::vector<int>(k.size(), not_ready)));
      },
      py::arg("keys"));
  def_both<key_t>(
      c, "is_exist",
      [](store& st, key_t k) {
        auto out = std::make_shared<std::vector<int>>();
        auto s = st.s;
        std::vector<std::string> keys{k};
        return prepared{[s, keys, out](store_session::node& n) { return assign(s->op_batch_exists(n, keys), out); },
                        [out] { return py::cast(out->empty() ? not_ready : (*out)[0]); }, constant(not_ready)};
      },
      py::arg("key"));
  def_both<key_t>(
      c, "get_size",
      [](store& st, key_t k) {
        return simple<std::int64_t>(
            st, [k](store_session& s, store_session::node& n) { return s.op_get_size(n, k); },
            constant(std::int64_t{not_ready}));
      },
      py::arg("key"));
  def_both<key_t, bool>(
      c, "remove",
      [](store& st, key_t k, bool) {
        return simple<int>(
            st, [k](store_session& s, store_session::node& n) { return s.op_remove(n, k); }, constant(not_ready));
      },
      py::arg("key"), py::arg("force") = false);
  def_both<keys_t, bool>(
      c, "batch_remove",
      [](store& st, keys_t k, bool) {
        return simple<std::vector<int>>(
            st, [k](store_session& s, store_session::node& n) { return s.op_batch_remove(n, k); },
            constant(std::vector<int>(k.size(), not_ready)));
      },
      py::arg("keys"), py::arg("force") = false);
  def_both<key_t, bool>(
      c, "remove_by_regex",
      [](store& st, key_t re, bool) {
        return simple<std::int64_t>(
            st, [re](store_session& s, store_session::node& n) { return s.op_remove_matching(n, re, false); },
            constant(std::int64_t{not_ready}));
      },
      py::arg("regex_pattern"), py::arg("force") = false);
  def_both<bool>(
      c, "remove_all",
      [](store& st, bool) {
        return simple<std::int64_t>(
            st, [](store_session& s, store_session::node& n) { return s.op_remove_matching(n, "", true); },
            constant(std::int64_t{not_ready}));
      },
      py::arg("force") = false);
  def_both<key_t>(
      c, "remove_local",
      [](store& st, key_t k) {
        return simple<int>(
            st, [k](store_session& s, store_session::node& n) { return s.op_remove_local(n, k); }, constant(not_ready));
      },
      py::arg("key"));
  def_both<>(c, "remove_all_local", [](store& st) {
    return simple<std::int64_t>(
        st, [](store_session& s, store_session::node& n) { return s.op_remove_all_local(n); },
        constant(std::int64_t{not_ready}));
  });
}

}  // namespace

}  // namespace mc::python

PYBIND11_MODULE(_native, m) {
  using namespace mc::python;
  m.doc() = "mooncake-p2p: Mooncake's MooncakeDistributedStore on a P2P node embedded in this process";
  m.attr("__version__") = std::string(mc::config::project_version());
  m.attr("__revision__") = std::string(mc::config::vcs_revision());
  bind_types(m);
  bind_async(m);
  bind_host_mem(m);
  store_class c(m, "MooncakeDistributedStore");
  bind_lifecycle(c);
  bind_data(c);
}
