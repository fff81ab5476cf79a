"""Replays LMCache's Mooncake store backend against mooncake-p2p.

Source replayed: LMCache/LMCache,
lmcache/v1/storage_backend/connector/mooncakestore_connector.py at
958d8ce4cd478b639e83f770735577487e221839 (the MooncakeStore connector): setup
from its config, then per chunk
  exists   is_exist(key) == 1
  put      put_from(key, buffer pointer, size) of a 32 MiB-class chunk (buffers registered once)
  get      batch_get_into(keys, pointers, sizes) of several chunks
Chunk sizes here are deliberately odd.

    python3 lmcache_backend.py MASTER_HOST:PORT
"""
import ctypes
import hashlib
import random
import sys

from mooncake.store import MooncakeDistributedStore

CHUNK = 8 * (1 << 20) + 333
CHUNKS = 4


def main(master):
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 256 << 20, 64 << 20, "tcp", "", master)
    assert rc == 0, rc
    src = (ctypes.c_char * (CHUNK * CHUNKS))()
    dst = (ctypes.c_char * (CHUNK * CHUNKS))()
    for b in (src, dst):
        assert store.register_buffer(ctypes.addressof(b), ctypes.sizeof(b)) == 0
    rng = random.Random(3)
    ctypes.memmove(ctypes.addressof(src), rng.randbytes(ctypes.sizeof(src)), ctypes.sizeof(src))
    keys = [f"lmcache@chunk{i}" for i in range(CHUNKS)]
    for i, k in enumerate(keys):
        if store.is_exist(k) != 1:
            assert store.put_from(k, ctypes.addressof(src) + i * CHUNK, CHUNK) == 0
    assert all(store.is_exist(k) == 1 for k in keys)
    res = store.batch_get_into(keys, [ctypes.addressof(dst) + i * CHUNK for i in range(CHUNKS)], [CHUNK] * CHUNKS)
    assert res == [CHUNK] * CHUNKS, res
    assert hashlib.sha256(dst.raw).hexdigest() == hashlib.sha256(src.raw).hexdigest()
    store.close()
    print(f"lmcache replay: {CHUNKS} chunks of {CHUNK} bytes, checksums match")


if __name__ == "__main__":
    main(sys.argv[1])
