"""A second Python process holding values (test helper, not a test).

    peer_process.py MASTER PREFIX COUNT SIZE SEED
puts COUNT random values of SIZE bytes (PREFIX0..), writes their sha256 to
stdout one per line followed by "ready", then serves until terminated.
"""
import hashlib
import random
import signal
import sys
import time

from mooncake.store import MooncakeDistributedStore

master, prefix, count, size, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
s = MooncakeDistributedStore()
rc = s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "global_segment_size": "256MB",
              "local_buffer_size": "16MB", "protocol": "tcp", "master_server_addr": master,
              "heartbeat_interval": "200ms"})
if rc != 0:
    print(f"setup failed {rc}", flush=True)
    sys.exit(1)
rng = random.Random(seed)
for i in range(count):
    v = rng.randbytes(size + i)
    assert s.put(f"{prefix}{i}", v) == 0
    print(hashlib.sha256(v).hexdigest(), flush=True)
print("ready", flush=True)
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
while not stop:
    time.sleep(0.05)
s.close()
