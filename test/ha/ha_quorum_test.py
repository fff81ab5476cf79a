#!/usr/bin/env python3
"""Master HA on a 3-member etcd cluster, end to end with the real binaries
(suite integration): three etcd members, three masters, three nodes, and a
get workload (mooncake_cli, one process per get) running throughout. A get
must return the value's exact bytes or a retriable error (TIMEOUT,
RPC_FAIL, UNAVAILABLE_IN_CURRENT_STATUS); a wrong byte or an
OBJECT_NOT_FOUND of a stored key is a violation.
 1. kill -9 of the etcd member every process lists first: no interruption
    (the same master leads, no get of the workload fails);
 2. kill -9 of the leading master: a standby takes over, every key is
    readable through it;
 3. all of etcd killed: the leader stops leading once its lease ran out
    (its /metrics say so), the nodes keep serving the values they hold
    (local hits over their HTTP /kv), no process crashes;
 4. etcd back (the three members restart on their data): a leader is
    elected and every key is readable again within a stated bound (15 s;
    the time is printed).
Usage: ha_quorum_test.py APPS_DIR. Exit 77 (skip) when etcd is missing.
"""
import concurrent.futures
import hashlib
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ha_cluster import Cluster, fail, free_port  # noqa: E402

BOUND_S = 15.0
RETRIABLE = ("TIMEOUT", "RPC_FAIL", "UNAVAILABLE_IN_CURRENT_STATUS")



class Workload(threading.Thread):
    """Gets of random stored keys until stopped; counts outcomes per phase.
    `digests`: {key: sha256 of its value}."""

    def __init__(self, c, digests, tmp):
        super().__init__(daemon=True)
        self.c, self.digests, self.tmp = c, digests, tmp
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.phase = "start"
        self.counts = {}  # phase -> {"ok": n, "retriable": n}
        self.violations = []

    def set_phase(self, name):
        with self.lock:
            self.phase = name

    def run(self):
        out = os.path.join(self.tmp, "workload-out")
        keys = sorted(self.digests)
        while not self.stop_flag.is_set():
            key = random.choice(keys)
            r = self.c.cli("get", key, out, timeout_ms=2000)
            err = r.stderr.decode(errors="replace")
            with self.lock:
                phase = self.phase
                n = self.counts.setdefault(phase, {"ok": 0, "retriable": 0})
            if r.returncode == 0:
                with open(out, "rb") as a:
                    if hashlib.sha256(a.read()).digest() != self.digests[key]:
                        self.violations.append("%s: %s came back with other bytes" % (phase, key))
                n["ok"] += 1
            elif r.returncode == 1 and any(e in err for e in RETRIABLE):
                n["retriable"] += 1
            else:
                self.violations.append("%s: get %s: rc %d %s" % (phase, key, r.returncode, err.strip()))


def main():
    apps = sys.argv[1]
    if not shutil.which("etcd") or not shutil.which("etcdctl"):
        print("SKIP: etcd/etcdctl not installed")
        return 77
    tmp = tempfile.mkdtemp(prefix="mc-ha-quorum-")
    c = Cluster(apps, masters=3, etcd_members=3, cluster_id="ha_quorum")
    try:
        return run(c, tmp)
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def run(c, tmp):
    c.start_etcd()
    for i in range(3):
        c.start_master(i)
    first = c.wait_leader(timeout=c.STARTUP_TIMEOUT_S)
    http = [free_port() for _ in range(3)]
    for p in http:
        c.start_node(http_port=p)
    values = c.make_values(tmp, "q", [1, 4097, 65536 + 3, 100003, (1 << 20) + 13, 7])
    digests = {}
    for key, path in values.items():
        with open(path, "rb") as f:
            digests[key] = hashlib.sha256(f.read()).digest()
    c.put_values(values, within=30)

    def check_all(within, what):
        return c.check_values(values, tmp, within, what)

    def alive(what):
        for name, p in c.procs.items():
            if p.poll() is not None and name not in dead:
                fail("%s: %s exited with %s" % (what, name, p.returncode), c)

    dead = set()
    check_all(10, "stored")
    print("3 etcd members, 3 masters (%s leads), 3 nodes; %d values stored" % (first, len(values)))
    w = Workload(c, digests, tmp)
    w.start()
    try:
        time.sleep(2)

        # 1. One etcd member (the one listed first everywhere) dies.
        w.set_phase("one etcd member down")
        c.kill_etcd(0)
        dead.add("etcd")
        time.sleep(5)
        if c.leader_name() != first:
            fail("losing one etcd member changed the leader: %s -> %s" % (first, c.leader_name()), c)
        phase = w.counts.get("one etcd member down", {})
        if phase.get("retriable", 0) != 0 or phase.get("ok", 0) == 0:
            fail("losing one etcd member interrupted the workload: %s" % phase, c)
        alive("one etcd member down")
        print("etcd member 0 killed: %s still leads; workload %s" % (first, phase))
        c.start_etcd(0)
        dead.discard("etcd")

        # 2. The leading master dies.
        w.set_phase("leader killed")
        t0 = time.time()
        c.kill(first)
        dead.add(first)
        took = check_all(BOUND_S, "after kill -9 of the leader")
        second = c.wait_leader(not_name=first)
        print("kill -9 %s: %s leads; every key readable %.2f s after the kill (reads took %.2f s)"
              % (first, second, time.time() - t0, took))

        # 3. All of etcd dies.
        w.set_phase("etcd down")
        for i in range(3):
            c.kill_etcd(i)
            dead.add("etcd" if i == 0 else "etcd%d" % i)
        t0 = time.time()
        while True:
            m = c.http(second, "/metrics")[1] or ""
            if "mc_master_ha_leader 0" in m:
                break
            if time.time() - t0 > BOUND_S:
                fail("the leader still leads %.1f s after etcd died" % (time.time() - t0), c)
            time.sleep(0.1)
        print("etcd down: %s stopped leading after %.2f s (lease %d ms)" % (second, time.time() - t0,
                                                                               c.lease_ttl_ms))
        # Local hits: every value is served by a node that holds it. Every
        # node is asked for every key at once: a node that does not hold the
        # key asks the (gone) master and answers only when its lookup or our
        # 5 s timeout ends; one after the other, that was 60 s of waiting
        # whenever the last node asked held the values.
        def ask(key, n, port):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/kv/%s" % (port, key), timeout=5) as r:
                    if r.status == 200 and hashlib.sha256(r.read()).digest() == digests[key]:
                        return key, "node%d" % n
            except (urllib.error.URLError, OSError):
                pass
            return key, None

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(digests) * len(http)) as pool:
            answers = list(pool.map(lambda a: ask(*a), [(k, n, p) for k in digests for n, p in enumerate(http)]))
        served = {}
        for key, node in answers:
            if node is not None:
                served.setdefault(key, node)
        if len(served) != len(values):
            fail("without etcd, values not served by their holders: %s"
                 % sorted(set(values) - set(served)), c)
        time.sleep(2)
        alive("etcd down")
        print("etcd down: every value served locally by its holder (%s); no process exited" % served)

        # 4. etcd comes back.
        w.set_phase("etcd back")
        t0 = time.time()
        c.start_etcd()
        for name in list(dead):
            if name.startswith("etcd"):
                dead.discard(name)
        leader = c.wait_leader(timeout=BOUND_S)
        took = check_all(BOUND_S, "after etcd came back")
        total = time.time() - t0
        if total > BOUND_S + 5:
            fail("etcd back: every key readable only after %.1f s" % total, c)
        print("etcd back: %s leads; every key readable %.2f s after etcd restarted" % (leader, total))
        alive("etcd back")
    finally:
        w.stop_flag.set()
        w.join(timeout=30)
    if w.violations:
        fail("workload violations: %s" % w.violations[:10], c)
    print("workload: %s" % w.counts)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
