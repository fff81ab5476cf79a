"""Replays SGLang HiCache's Mooncake backend against mooncake-p2p.

Source replayed: sgl-project/sglang, python/sglang/srt/mem_cache/storage/
mooncake_store/mooncake_store.py at 00fe477f32b3878f64d44cc36895e1de4a113afe:
  MooncakeStore.__init__  store.setup(hostname, metadata_server, segment, 16 MiB, protocol,
                          device_name, master, transfer_engine=None)        (8 positional arguments)
  MooncakeStore.warmup    put(4 KiB) -> is_exist == 1 -> get == value
  register_mem_pool_host  register_buffer(host pool pointer, size)
  batch_set_v1            batch_is_exist(keys) -> batch_put_from(missing keys, pointers, sizes)
  batch_get_v1            batch_get_into(keys, pointers, sizes); a page is loaded when every result > 0
Keys are "<page hash>_<tp rank>_k" / "_v", one K and one V object per page.

    python3 sglang_hicache.py MASTER_HOST:PORT
"""
import ctypes
import hashlib
import random
import sys
import uuid

from mooncake.store import MooncakeDistributedStore

PAGE_BYTES = 256 * 1024 + 40  # a K or V object of one page (not a multiple of any block size)
PAGES = 48


def main(master):
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 512 << 20, 16 << 20, "tcp", "", master, None)
    assert rc == 0, rc
    warm = "sglang_mooncake_store_warmup_key" + uuid.uuid4().hex
    assert store.put(warm, bytes(4096)) == 0
    assert store.is_exist(warm) == 1 and store.get(warm) == bytes(4096)

    # The host KV pool: one registered region, pages addressed by pointer.
    pool = (ctypes.c_char * (2 * PAGES * PAGE_BYTES))()
    base = ctypes.addressof(pool)
    assert store.register_buffer(base, ctypes.sizeof(pool)) == 0
    rng = random.Random(42)
    ctypes.memmove(base, rng.randbytes(ctypes.sizeof(pool)), ctypes.sizeof(pool))
    digest = hashlib.sha256(pool.raw).hexdigest()

    pages = [f"page{i:04d}" for i in range(PAGES)]
    keys, ptrs, sizes = [], [], []
    for i, p in enumerate(pages):
        for j, kv in enumerate(("k", "v")):
            keys.append(f"{p}_0_{kv}")
            ptrs.append(base + (2 * i + j) * PAGE_BYTES)
            sizes.append(PAGE_BYTES)

    # batch_set_v1: only keys that do not exist yet are written.
    exist = store.batch_is_exist(keys)
    missing = [i for i, e in enumerate(exist) if e != 1]
    res = store.batch_put_from([keys[i] for i in missing], [ptrs[i] for i in missing], [sizes[i] for i in missing])
    assert all(r == 0 for r in res), res
    assert store.batch_is_exist(keys) == [1] * len(keys)
    # A second set of the same pages writes nothing.
    assert [i for i, e in enumerate(store.batch_is_exist(keys)) if e != 1] == []

    # batch_get_v1 into a cleared pool.
    ctypes.memset(base, 0, ctypes.sizeof(pool))
    res = store.batch_get_into(keys, ptrs, sizes)
    assert all(r > 0 for r in res), res
    assert hashlib.sha256(pool.raw).hexdigest() == digest
    assert store.unregister_buffer(base) == 0
    store.close()
    print(f"sglang replay: {len(keys)} objects set and loaded, checksums match")


if __name__ == "__main__":
    main(sys.argv[1])
