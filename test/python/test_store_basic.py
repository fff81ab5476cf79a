"""Single-node semantics of MooncakeDistributedStore (Mooncake's names,
arguments, return values and error codes) against a real master."""
import ctypes
import hashlib
import random

import pytest

from conftest import new_store

OBJECT_NOT_FOUND = -704
BUFFER_OVERFLOW = -10
INVALID_PARAMS = -600

# Odd sizes: multiples of no block, slice or page size.
SIZES = [1, 7, 4095, 4097, 65535, 65537, 1 << 20 | 13, 3 * (1 << 20) + 5, 9 * (1 << 20) - 3]


def payload(rng, n):
    return rng.randbytes(n)


def digest(b):
    return hashlib.sha256(b).hexdigest()


def cbuf(n):
    """Caller memory the way connectors pass it: an integer address."""
    b = (ctypes.c_char * max(n, 1))()
    return b, ctypes.addressof(b)


def test_put_get_roundtrip_random_sizes(store):
    rng = random.Random(15)
    for n in SIZES:
        v = payload(rng, n)
        assert store.put(f"k{n}", v) == 0
        got = store.get(f"k{n}")
        assert digest(got) == digest(v), n
        assert store.get_size(f"k{n}") == n
        assert store.is_exist(f"k{n}") == 1


def test_missing_key_answers(store):
    assert store.get("missing") == b""
    assert store.get_buffer("missing") is None
    assert store.is_exist("missing") == 0
    assert store.get_size("missing") == OBJECT_NOT_FOUND
    assert store.remove("missing") == OBJECT_NOT_FOUND
    b, p = cbuf(16)
    assert store.get_into("missing", p, 16) == OBJECT_NOT_FOUND


def test_put_keeps_existing_upsert_replaces(store):
    assert store.put("same", b"first") == 0
    assert store.put("same", b"second, longer") == 0
    assert store.get("same") == b"first"
    assert store.upsert("same", b"third") == 0
    assert store.get("same") == b"third"
    b, p = cbuf(8)
    ctypes.memmove(p, b"fromptr!", 8)
    assert store.upsert_from("same", p, 8) == 0
    assert store.get("same") == b"fromptr!"
    assert store.put_from("same", p, 3) == 0  # kept
    assert store.get("same") == b"fromptr!"


def test_zero_copy_put_from_get_into(store):
    rng = random.Random(7)
    n = 2 * (1 << 20) + 3
    src, sp = cbuf(n)
    data = payload(rng, n)
    ctypes.memmove(sp, data, n)
    assert store.register_buffer(sp, n) == 0
    assert store.put_from("zc", sp, n) == 0
    dst, dp = cbuf(n + 100)
    assert store.register_buffer(dp, n + 100) == 0
    assert store.get_into("zc", dp, n + 100) == n
    assert digest(dst.raw[:n]) == digest(data)
    # A buffer too small is an error and nothing is written.
    small, smp = cbuf(1000)
    ctypes.memset(smp, 0x5A, 1000)
    assert store.get_into("zc", smp, 1000) == BUFFER_OVERFLOW
    assert small.raw == b"\x5a" * 1000
    assert store.unregister_buffer(sp) == 0
    assert store.unregister_buffer(sp) == INVALID_PARAMS  # not registered any more
    assert store.unregister_buffer(dp) == 0
    # Overlapping registrations are refused.
    assert store.register_buffer(dp, 100) == 0
    assert store.register_buffer(dp + 50, 100) == INVALID_PARAMS
    assert store.unregister_buffer(dp) == 0


def test_parts_and_batches(store):
    assert store.put_parts("parts", b"ab", bytearray(b"cd"), memoryview(b"ef")) == 0
    assert store.get("parts") == b"abcdef"
    assert store.put_batch(["b1", "b2"], [b"one", b"two"]) == 0
    assert store.get_batch(["b1", "nope", "b2"]) == [b"one", b"", b"two"]
    handles = store.batch_get_buffer(["b1", "nope"])
    assert bytes(memoryview(handles[0])) == b"one" and handles[1] is None
    assert handles[0].size() == 3 and len(handles[0]) == 3 and handles[0].ptr() != 0
    assert store.batch_is_exist(["b1", "nope", "b2"]) == [1, 0, 1]


def test_batch_put_from_get_into_missing_and_short(store):
    rng = random.Random(3)
    sizes = [1, 4097, 70000, 1 << 20 | 1]
    keys = [f"bk{i}" for i in range(len(sizes))]
    bufs = [cbuf(n) for n in sizes]
    data = [payload(rng, n) for n in sizes]
    for (b, p), d in zip(bufs, data):
        ctypes.memmove(p, d, len(d))
    assert store.batch_put_from(keys, [p for _, p in bufs], sizes) == [0] * len(keys)
    outs = [cbuf(n) for n in sizes]
    short = cbuf(10)
    ptrs = [p for _, p in outs] + [outs[0][1], short[1]]
    lens = sizes + [sizes[0], 10]
    res = store.batch_get_into(keys + ["missing", keys[3]], ptrs, lens)
    assert res[: len(sizes)] == sizes
    assert res[len(sizes)] == OBJECT_NOT_FOUND
    assert res[len(sizes) + 1] == BUFFER_OVERFLOW
    for (b, _), d in zip(outs, data):
        assert digest(b.raw[: len(d)]) == digest(d)
    # The stored values are intact after the failures.
    assert digest(store.get(keys[3])) == digest(data[3])


def test_mismatched_lengths_are_negative_never_raise(store):
    b, p = cbuf(8)
    assert store.batch_put_from(["a", "b"], [p], [8]) == [INVALID_PARAMS, INVALID_PARAMS]
    assert store.batch_get_into(["a", "b"], [p], [8, 8]) == [INVALID_PARAMS, INVALID_PARAMS]
    assert store.batch_put_from_multi_buffers(["a"], [[p, p]], [[8]]) == [INVALID_PARAMS]
    assert store.batch_get_into_multi_buffers(["a", "b"], [[p]], [[8]]) == [INVALID_PARAMS, INVALID_PARAMS]
    assert store.put_batch(["a", "b"], [b"x"]) == INVALID_PARAMS
    assert store.is_exist("a") == 0 and store.is_exist("b") == 0


def test_unknown_keyword_raises_type_error(store):
    with pytest.raises(TypeError):
        store.put("k", b"v", no_such_argument=1)
    with pytest.raises(TypeError):
        store.batch_get_into(["k"], [0], [1], bogus=True)


def test_multi_buffer_scatter_gather_random_pieces(store):
    rng = random.Random(11)
    keys, all_ptrs, all_sizes, values, keep = [], [], [], [], []
    for k in range(6):
        pieces = [rng.randint(1, 70000) for _ in range(rng.randint(1, 40))]
        value = payload(rng, sum(pieces))
        # Pieces in any memory order: allocate them in a shuffled order.
        order = list(range(len(pieces)))
        rng.shuffle(order)
        mem = [None] * len(pieces)
        for i in order:
            mem[i] = cbuf(pieces[i])
        off = 0
        # assign value slices to the (shuffled) buffers in piece order
        ptrs, sizes = [], []
        for (b, p), n in zip(mem, pieces):
            ctypes.memmove(p, value[off:off + n], n)
            ptrs.append(p)
            sizes.append(n)
            off += n
        keys.append(f"mb{k}")
        all_ptrs.append(ptrs)
        all_sizes.append(sizes)
        values.append(value)
        keep.append(mem)
    assert store.batch_put_from_multi_buffers(keys, all_ptrs, all_sizes) == [0] * len(keys)
    for k, v in zip(keys, values):
        assert digest(store.get(k)) == digest(v)
    # Scatter into fresh pieces of other sizes (the same totals).
    out_ptrs, out_sizes, out_mem = [], [], []
    for v in values:
        cuts = sorted(rng.sample(range(1, len(v)), min(5, len(v) - 1))) if len(v) > 1 else []
        bounds = [0] + cuts + [len(v)]
        mem = [cbuf(bounds[i + 1] - bounds[i]) for i in range(len(bounds) - 1)]
        out_mem.append(mem)
        out_ptrs.append([p for _, p in mem])
        out_sizes.append([bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)])
    res = store.batch_get_into_multi_buffers(keys + ["missing"], out_ptrs + [out_ptrs[0]], out_sizes + [out_sizes[0]])
    assert res[:-1] == [len(v) for v in values]
    assert res[-1] == OBJECT_NOT_FOUND
    for mem, sizes, v in zip(out_mem, out_sizes, values):
        got = b"".join(b.raw[:n] for (b, _), n in zip(mem, sizes))
        assert digest(got) == digest(v)


def test_removal_forms(store):
    for k in ["r/a1", "r/a2", "r/b1", "s/x"]:
        assert store.put(k, k.encode()) == 0
    assert store.remove_by_regex("^r/a") == 2
    assert store.batch_is_exist(["r/a1", "r/a2", "r/b1", "s/x"]) == [0, 0, 1, 1]
    assert store.remove_by_regex("(") == INVALID_PARAMS
    assert store.batch_remove(["r/b1", "nope"]) == [0, OBJECT_NOT_FOUND]
    assert store.remove_local("s/x") == 0
    assert store.is_exist("s/x") == 0
    assert store.remove_local("s/x") == OBJECT_NOT_FOUND
    for k in ["t1", "t2", "t3"]:
        store.put(k, b"v")
    assert store.remove_all_local() == 3
    assert store.batch_is_exist(["t1", "t2", "t3"]) == [0, 0, 0]
    for k in ["u1", "u2"]:
        store.put(k, b"v")
    assert store.remove_all() == 2
    assert store.batch_is_exist(["u1", "u2"]) == [0, 0]


def test_close_then_calls_fail_cleanly_and_resetup(master):
    s = new_store(master)
    assert s.put("c", b"value") == 0
    h = s.get_buffer("c")
    assert s.health_check() == 0
    assert s.close() == 0
    assert s.close() == 0  # idempotent
    assert s.health_check() == 1
    assert s.put("c2", b"x") == INVALID_PARAMS
    assert s.get("c") == b""
    assert s.batch_is_exist(["c"]) == [INVALID_PARAMS]
    assert bytes(memoryview(h)) == b"value"  # the handle owns its memory
    s2 = new_store(master)
    assert s2.put("c3", b"again") == 0 and s2.get("c3") == b"again"
    s2.close()
    # The same object can be set up again after close().
    from conftest import new_store as ns  # noqa: F401
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                    "master_server_addr": master, "global_segment_size": "16MB"}) == 0
    assert s.put("c4", b"z") == 0 and s.get("c4") == b"z"
    assert s.close() == 0


def test_setup_positional_and_bad_config(master):
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master) == 0
    assert s.get_hostname() == "127.0.0.1"
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master) == INVALID_PARAMS
    s.close()
    bad = MooncakeDistributedStore()
    assert bad.setup({"local_hostname": "127.0.0.1", "master_server_addr": master, "no_such_option": 1}) < 0
    assert bad.setup({"local_hostname": "127.0.0.1", "master_server_addr": master,
                      "global_segment_size": "lots"}) < 0
    for host in ("127.0.0.1:99999", "127.0.0.1:x", "[::1", "a b", "[127.0.0.1]:1"):
        assert bad.setup({"local_hostname": host, "master_server_addr": master}) < 0, host
    assert bad.setup({"local_hostname": "127.0.0.1", "master_server_addr": "127.0.0.1"}) < 0  # no port
    assert bad.setup_p2p_real_client({"local_hostname": "127.0.0.1", "master_server_addr": master,
                                      "client_rpc_port": 0, "rpc_thread_num": 2, "lock_shard_count": 64,
                                      "tiered_backend_config":
                                      '{"tiers":[{"type":"DRAM","capacity":"32MB","priority":100}]}'}) == 0
    assert bad.put("p2p", b"ok") == 0 and bad.get("p2p") == b"ok"
    bad.close()


def test_replicate_config_accepted(store):
    from mooncake.store import ReplicateConfig

    cfg = ReplicateConfig()
    cfg.replica_num = 1
    cfg.with_hard_pin = True
    cfg.preferred_segment = "somewhere"
    assert store.put("rc", b"v", cfg) == 0
    assert store.put_from("rc2", 0, 0, config=cfg) == INVALID_PARAMS
    assert "replica_num=1" in str(cfg)


def test_host_mem_allocator(store):
    from mooncake.store import MooncakeHostMemAllocator

    a = MooncakeHostMemAllocator()
    n = 3 * 4096 + 5
    p = a.alloc(n)
    assert p != 0 and p % 4096 == 0
    assert ctypes.string_at(p, n) == bytes(n)
    ctypes.memmove(p, b"pool" * (n // 4), (n // 4) * 4)
    assert store.register_buffer(p, n) == 0
    assert store.put_from("pool", p, n) == 0
    assert store.get("pool") == ctypes.string_at(p, n)
    assert store.unregister_buffer(p) == 0
    assert a.free(p) == 0
    assert a.free(p) == INVALID_PARAMS
    assert a.alloc(0) == 0
