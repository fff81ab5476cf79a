"""Across processes: values one Python process put are read by another; a
pure client puts on a peer; a get that waits on a stopped owner releases the
GIL; eight threads share one store; a child forked after setup gets errors,
never a hang, and can set up its own."""
import ctypes
import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time

from conftest import new_store, py_proc, sigstop


def start_peer(procs, master, prefix, count, size, seed=1):
    p = py_proc(procs, "peer-" + prefix, "peer_process.py", master, prefix, count, size, seed)
    digests = []
    with open(p.log_path, "rb") as log:
        deadline = time.monotonic() + 30
        buf = b""
        while time.monotonic() < deadline:
            buf += log.read()
            lines = buf.decode().splitlines()
            if "ready" in lines:
                digests = lines[: lines.index("ready")]
                break
            if p.poll() is not None:
                raise RuntimeError("peer exited: " + buf.decode())
            time.sleep(0.05)
    assert len(digests) == count, buf
    return p, digests


def test_cross_process_reads(procs, master, store):
    size = 3 * (1 << 20) + 17
    peer, digests = start_peer(procs, master, "xp", 5, size)
    keys = [f"xp{i}" for i in range(5)]
    assert store.batch_is_exist(keys + ["xp-missing"]) == [1] * 5 + [0]
    for k, d in zip(keys, digests):
        assert hashlib.sha256(store.get(k)).hexdigest() == d
    # Zero copy batch into caller memory, sizes not multiples of anything.
    bufs = [(ctypes.c_char * (size + i))() for i in range(5)]
    res = store.batch_get_into(keys, [ctypes.addressof(b) for b in bufs], [size + i for i in range(5)])
    assert res == [size + i for i in range(5)]
    for b, d in zip(bufs, digests):
        assert hashlib.sha256(b.raw).hexdigest() == d
    assert store.get_size("xp2") == size + 2


def test_pure_client_puts_on_a_peer(procs, master):
    peer, _ = start_peer(procs, master, "pc", 1, 10)
    pure = new_store(master, segment=0)
    data = os.urandom(200_001)
    assert pure.put("pure-key", data) == 0
    assert pure.get("pure-key") == data
    other = new_store(master)
    assert other.get("pure-key") == data
    other.close()
    pure.close()


def test_gil_released_while_owner_is_stopped(procs, master, store):
    peer, digests = start_peer(procs, master, "st", 1, 100_000)
    assert store.get_size("st0") == 100_000  # route cached
    sigstop(peer.pid)
    try:
        ticks = []
        stop = threading.Event()

        def ticker():
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.01)

        t = threading.Thread(target=ticker)
        t.start()
        b = (ctypes.c_char * 100_000)()
        started = time.monotonic()
        rc = store.get_into("st0", ctypes.addressof(b), 100_000)
        waited = time.monotonic() - started
        stop.set()
        t.join()
        assert rc < 0  # the owner never answered (timeout / rpc failure)
        # The other thread ran while get_into waited on the stopped owner.
        during = [x for x in ticks if started < x < started + waited]
        assert len(during) >= 5, (len(during), waited)
    finally:
        os.kill(peer.pid, signal.SIGCONT)


def test_eight_threads_share_one_store(store):
    errors = []

    def worker(n):
        rng = random.Random(n)
        try:
            for i in range(40):
                v = rng.randbytes(rng.randint(1, 300_000))
                k = f"t{n}-{i}"
                assert store.put(k, v) == 0
                assert store.get(k) == v
                b = (ctypes.c_char * len(v))()
                assert store.get_into(k, ctypes.addressof(b), len(v)) == len(v)
                assert b.raw == v
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.batch_is_exist([f"t{n}-39" for n in range(8)]) == [1] * 8


def test_fork_child_gets_errors_and_can_set_up(master, store):
    assert store.put("before-fork", b"v") == 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            os.close(r)
            res = [store.put("child", b"x"), store.get("before-fork"), store.health_check(), store.close()]
            ok = res == [-600, b"", 1, 0]
            from mooncake.store import MooncakeDistributedStore
            mine = MooncakeDistributedStore()
            rc = mine.setup({"local_hostname": "127.0.0.1", "master_server_addr": master,
                             "global_segment_size": "16MB"})
            ok = ok and rc == 0 and mine.get("before-fork") == b"v"
            mine.close()
            os.write(w, b"ok" if ok else repr(res).encode())
        except BaseException as e:  # noqa: BLE001
            os.write(w, repr(e).encode())
            code = 1
        os._exit(code)
    os.close(w)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child hung")
    msg = os.read(r, 4096)
    os.close(r)
    assert msg == b"ok", msg
    assert store.get("before-fork") == b"v"  # the parent is unaffected


def replica_cluster(procs, name):
    """A master with short TTLs (routes 1 s, drop 3 s) and HTTP, and three
    mooncake_client nodes. Returns (master address, {rpc port: process},
    holders(key) -> sorted rpc ports of its copies, get(path) -> master HTTP body)."""
    import json
    import urllib.request

    from conftest import BIN, free_port, start_node, wait_port

    rpc, http = free_port(), free_port()
    procs.spawn("master-" + name, [os.path.join(BIN, "mooncake_master"), "--rpc_port", str(rpc), "--metrics_port",
                                   str(http), "--client_ttl", "1s", "--client_drop_ttl", "3s"])
    wait_port(rpc)
    wait_port(http)
    master = f"127.0.0.1:{rpc}"
    nodes = {}
    for i in range(3):
        p, port = start_node(procs, master, f"{name}{i}")
        nodes[port] = p

    def get(path):
        with urllib.request.urlopen(f"http://127.0.0.1:{http}{path}", timeout=5) as r:
            return r.read().decode()

    def holders(key):
        return sorted(int(x["rpc_endpoint"].rsplit(":", 1)[1]) for x in json.loads(get(f"/key/{key}"))["replicas"])

    return master, nodes, holders, get

def test_replica_num_copies_survive_kill9_and_are_repaired(procs):
    """ReplicateConfig.replica_num = 2: each value on two distinct nodes;
    kill -9 of a holder loses nothing (reads fall back to the other copy),
    the master has a survivor copy it to the third node, and after that the
    other original holder can die too."""
    from mooncake.store import ReplicateConfig

    master, nodes, holders, _ = replica_cluster(procs, "rep")

    pure = new_store(master, segment=0)  # holds nothing itself: every copy is on a node
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    rnd = random.Random(7)
    data = {f"rep{i}": rnd.randbytes(n) for i, n in enumerate([1, 4097, 65537, (1 << 20) + 13, 3 * (1 << 20) + 7])}
    for k, v in data.items():
        assert pure.put(k, v, cfg) == 0, k
    for k in data:
        hs = holders(k)
        assert len(hs) == 2 and len(set(hs)) == 2, (k, hs)
    first, second = holders("rep4")
    nodes[first].kill()  # SIGKILL: no unregistration
    nodes[first].wait()
    for k, v in data.items():
        assert pure.get(k) == v, k  # the other copy answers
    # Repaired: two live copies of every key again, none on the dead node.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if all(len(hs) == 2 and first not in hs for hs in map(holders, data)):
                break
        except OSError:
            pass
        time.sleep(0.2)
    for k in data:
        hs = holders(k)
        assert len(hs) == 2 and first not in hs, (k, hs)
    nodes[second].kill()
    nodes[second].wait()
    # Only the repaired copies are left for the keys the two dead nodes held.
    fresh = new_store(master, segment=0)
    for k, v in data.items():
        assert fresh.get(k) == v, k
    bad = ReplicateConfig()
    bad.replica_num = 0
    assert pure.put("rep-bad", b"x", bad) == -600
    fresh.close()
    pure.close()


def test_replica_of_a_holder_back_from_the_dead_is_trimmed(procs):
    """A holder frozen past the drop TTL is declared dead and its copies are
    repaired elsewhere; when it wakes up and re-publishes, its copy is
    surplus: the master refuses it (trimmed) and the key keeps exactly N."""
    from mooncake.store import ReplicateConfig

    master, nodes, holders, get = replica_cluster(procs, "trim")

    def metric(name):
        for line in get("/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    pure = new_store(master, segment=0)
    cfg = ReplicateConfig()
    cfg.replica_num = 2
    v = random.Random(3).randbytes(200_003)
    assert pure.put("trim", v, cfg) == 0
    frozen, kept = holders("trim")
    sigstop(nodes[frozen].pid)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            hs = holders("trim")
            if len(hs) == 2 and frozen not in hs:
                break
            time.sleep(0.2)
        assert len(holders("trim")) == 2 and frozen not in holders("trim")
    finally:
        os.kill(nodes[frozen].pid, signal.SIGCONT)
    # It re-registers and re-publishes; its copy is refused and dropped.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and metric("mc_master_replicas_trimmed_total") < 1:
        time.sleep(0.2)
    assert metric("mc_master_replicas_trimmed_total") >= 1
    hs = holders("trim")
    assert len(hs) == 2 and frozen not in hs and kept in hs
    assert pure.get("trim") == v
    pure.close()
