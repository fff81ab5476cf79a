"""Standalone mode (Mooncake's setup_dummy, SGLang's standalone storage): the
Python process attaches to a mooncake_client node of this host instead of
embedding one; the node stores the values and moves the bytes."""
import ctypes
import hashlib
import random

from conftest import new_store, start_node

OBJECT_NOT_FOUND = -704
BUFFER_OVERFLOW = -10
UNSUPPORTED = -1103


def attach(rpc_port, local_buffer=16 << 20):
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    assert s.setup_dummy(64 << 20, local_buffer, f"127.0.0.1:{rpc_port}") == 0
    return s


def test_standalone_round_trip_and_batches(procs, master):
    node, rpc = start_node(procs, master, dram="256MiB")
    s = attach(rpc)
    assert s.health_check() == 0
    rng = random.Random(9)
    for n in [1, 4097, 1 << 20 | 3, 5 * (1 << 20) + 11]:
        v = rng.randbytes(n)
        assert s.put(f"sa{n}", v) == 0
        assert hashlib.sha256(s.get(f"sa{n}")).digest() == hashlib.sha256(v).digest()
        assert s.get_size(f"sa{n}") == n
    # Zero copy from / into memory of this process (the allocator SGLang uses).
    from mooncake.store import MooncakeHostMemAllocator

    alloc = MooncakeHostMemAllocator()
    size = 3 * 65536 + 7
    pool = alloc.alloc(4 * size)
    ctypes.memmove(pool, rng.randbytes(4 * size), 4 * size)
    want = ctypes.string_at(pool, 4 * size)
    assert s.register_buffer(pool, 4 * size) == 0
    keys = [f"sp{i}" for i in range(4)]
    assert s.batch_is_exist(keys) == [0] * 4
    assert s.batch_put_from(keys, [pool + i * size for i in range(4)], [size] * 4) == [0] * 4
    assert s.batch_is_exist(keys + ["nope"]) == [1] * 4 + [0]
    ctypes.memset(pool, 0, 4 * size)
    res = s.batch_get_into(keys + ["nope"], [pool + i * size for i in range(4)] + [pool], [size] * 4 + [size])
    assert res == [size] * 4 + [OBJECT_NOT_FOUND]
    assert ctypes.string_at(pool, 4 * size) == want
    short = (ctypes.c_char * 100)()
    assert s.get_into("sp0", ctypes.addressof(short), 100) == BUFFER_OVERFLOW
    # Multi-buffer scatter-gather.
    pieces = [[pool + i * size, pool + i * size + 1000] for i in range(2)]
    sizes = [[1000, size - 1000] for _ in range(2)]
    assert s.batch_upsert_from_multi_buffers(["mb0", "mb1"], pieces, sizes) == [0, 0]
    assert s.get("mb1") == want[size:2 * size]
    assert s.remove("mb0") == 0 and s.is_exist("mb0") == 0
    assert s.remove_by_regex("^sp") == UNSUPPORTED  # not through the attach service
    assert s.unregister_buffer(pool) == 0
    assert alloc.free(pool) == 0
    assert s.close() == 0
    assert s.put("after", b"x") == -600


def test_standalone_sees_the_cluster(procs, master):
    """A value another (embedded) node holds is read through the attached node,
    and what the attacher puts is visible cluster-wide."""
    node, rpc = start_node(procs, master)
    other = new_store(master)
    v = random.Random(1).randbytes(300_001)
    assert other.put("held-elsewhere", v) == 0
    s = attach(rpc)
    assert s.get("held-elsewhere") == v
    assert s.put("from-attacher", b"attached") == 0
    assert other.get("from-attacher") == b"attached"
    s.close()
    other.close()


def test_setup_dummy_without_a_node_fails_cleanly(procs, master):
    from mooncake.store import MooncakeDistributedStore
    from conftest import free_rpc_port

    s = MooncakeDistributedStore()
    assert s.setup_dummy(1 << 20, 1 << 20, f"127.0.0.1:{free_rpc_port()}") < 0
    assert s.put("k", b"v") == -600
    node, rpc = start_node(procs, master, extra=("--attach=false",))
    assert s.setup_dummy(1 << 20, 1 << 20, f"127.0.0.1:{rpc}") < 0
