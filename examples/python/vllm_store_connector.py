"""Replays vLLM's MooncakeStoreConnector worker against mooncake-p2p.

Source replayed: vllm-project/vllm,
vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/worker.py at
6d6eb50d7926f6f72b1980c35738ae75454d7ab4 (MooncakeStoreWorker;
KVCacheStoreSendingThread._handle_request and
KVCacheStoreRecvingThread._handle_request):
  save  batch_is_exist(keys) (dedup) -> batch_put_from_multi_buffers(keys, addrs, sizes, replicate_config);
        a key failed when its result < 0
  load  batch_get_into_multi_buffers(keys, addrs, sizes); a block failed when its result < 0
One key per KV block; each value gathered from / scattered into one piece per
layer (addrs[i] and sizes[i] are lists of layer pointers and sizes).

    python3 vllm_store_connector.py MASTER_HOST:PORT
"""
import ctypes
import hashlib
import random
import sys

from mooncake.store import MooncakeDistributedStore, ReplicateConfig

LAYERS = 32
LAYER_BLOCK_BYTES = 16 * 1024 + 24  # one block's KV of one layer
BLOCKS = 24


def main(master):
    store = MooncakeDistributedStore()
    rc = store.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                      "global_segment_size": "512MB", "local_buffer_size": "16MB", "protocol": "tcp",
                      "master_server_addr": master})
    assert rc == 0, rc
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    # vLLM's paged KV cache: one tensor per layer, blocks inside it.
    layers = [(ctypes.c_char * (BLOCKS * LAYER_BLOCK_BYTES))() for _ in range(LAYERS)]
    for t in layers:
        assert store.register_buffer(ctypes.addressof(t), ctypes.sizeof(t)) == 0
    rng = random.Random(7)
    for t in layers:
        ctypes.memmove(ctypes.addressof(t), rng.randbytes(ctypes.sizeof(t)), ctypes.sizeof(t))
    before = [hashlib.sha256(t.raw).hexdigest() for t in layers]

    keys = [f"vllm@block{b:05d}" for b in range(BLOCKS)]
    addrs = [[ctypes.addressof(t) + b * LAYER_BLOCK_BYTES for t in layers] for b in range(BLOCKS)]
    sizes = [[LAYER_BLOCK_BYTES] * LAYERS for _ in range(BLOCKS)]

    exists = store.batch_is_exist(keys)
    todo = [i for i, e in enumerate(exists) if e != 1]
    res = store.batch_put_from_multi_buffers([keys[i] for i in todo], [addrs[i] for i in todo],
                                             [sizes[i] for i in todo], cfg)
    assert not [i for i, v in enumerate(res) if v < 0], res

    for t in layers:
        ctypes.memset(ctypes.addressof(t), 0, ctypes.sizeof(t))
    res = store.batch_get_into_multi_buffers(keys, addrs, sizes)
    assert res == [LAYERS * LAYER_BLOCK_BYTES] * BLOCKS, res
    assert [hashlib.sha256(t.raw).hexdigest() for t in layers] == before
    for t in layers:
        assert store.unregister_buffer(ctypes.addressof(t)) == 0
    store.close()
    print(f"vllm replay: {BLOCKS} blocks x {LAYERS} layers saved and loaded, checksums match")


if __name__ == "__main__":
    main(sys.argv[1])
