#!/usr/bin/env python3
"""Chaos soak of mooncake-p2p (`make soak [MINUTES=N] [SEED=S]`; test/soak/README.md).

A master and NODES mooncake_client nodes (DRAM + SSD tiers), each node in its
own network namespace joined by a veth pair to a bridge in a hub namespace
(10.231.0.0/24, inside those namespaces only); workload processes
(test/soak/worker.py: the Python API, attached to a node or pure clients) in
the node namespaces; a chaos driver that follows a schedule made from SEED
(kill -9 / restart of nodes and of the master, SIGSTOP / SIGCONT, partitions,
packet loss with nftables, rate limits with tc tbf, SSD fills, an overload
phase); invariant checks (analyze.py) while it runs and at the end; a report
in OUT/report.md. Exit status 0 only with no violation. Root only; cleans up
its namespaces and the processes it started (by PID) on any exit.
"""
import argparse
import atexit
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "soak"))
import analyze  # noqa: E402
import worker  # noqa: E402

SUBNET = "10.231.0"
MASTER_IP = f"{SUBNET}.1"
MASTER_PORT = 50051
MASTER_HTTP = 9003
NODE_RPC, NODE_TE, NODE_HTTP = 12345, 50052, 9080
T0 = time.monotonic()


def now():
    return time.monotonic()


def log(msg):
    print(f"[{now() - T0:8.2f}] {msg}", flush=True)


def sh(*argv, check=True):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r


# ---------------------------------------------------------------- schedule

KINDS = [("kill", 5), ("stop", 4), ("master", 2), ("partition", 4), ("loss", 4), ("rate", 3), ("fill", 2)]


def make_schedule(seed, nodes, warmup, chaos_end, overload_at, overload_len):
    """The fault schedule: a pure function of its arguments. Each event:
    {t, kind, node (1-based, 0 for the master), dur, ...}. At most two faults
    at once, one per node, none during the overload window."""
    rng = random.Random(f"soak-schedule-{seed}")
    events = []
    busy = {}  # target -> busy until
    t = warmup
    # Kinds are dealt from a deck: every kind once (in a seeded order) before the
    # weighted ones, so even a short run has each fault; a kind that does not fit
    # now stays on top of the deck.
    deck = [k for k, _ in KINDS]
    rng.shuffle(deck)
    while True:
        t += rng.uniform(2.0, 6.0)
        if t >= chaos_end - 2:
            break
        if not deck:
            deck = [k for k, w in KINDS for _ in range(w)]
            rng.shuffle(deck)
        kind = deck[0]
        dur = {"kill": rng.uniform(1, 6), "stop": rng.uniform(0.5, 8), "master": rng.uniform(0.5, 5),
               "partition": rng.uniform(1, 25), "loss": rng.uniform(5, 20), "rate": rng.uniform(5, 20),
               "fill": 0.0}[kind]
        target = 0 if kind == "master" else rng.randint(1, nodes)
        ev = {"t": round(t, 3), "kind": kind, "node": target, "dur": round(dur, 3)}
        if kind == "loss":
            ev["pct"] = rng.choice([2, 5, 10, 20, 35])
        if kind == "rate":
            ev["mbit"] = rng.choice([1, 4, 16, 64])
        if kind == "fill":
            ev["dur"] = 15.0  # the fill's length bound (the worker ends it sooner)
        end = t + ev["dur"]
        if end > chaos_end:
            continue
        if overload_at is not None and t < overload_at + overload_len and end > overload_at - 2:
            continue
        active = [e for e in events if e["t"] + e["dur"] > t]
        if len(active) >= 2 or busy.get(target, -1) > t:
            continue
        if kind == "master" and any(e["kind"] == "master" for e in active):
            continue
        busy[target] = end + 1.0
        events.append(ev)
        deck.pop(0)
    return events


# ---------------------------------------------------------------- processes

class Proc:
    def __init__(self, name, ns, argv, logdir, env=None, role="worker"):
        self.name, self.ns, self.argv, self.role = name, ns, argv, role
        self.log_path = os.path.join(logdir, name + ".log")
        self.env = env
        self.p = None
        self.expected_exit = False
        self.starts = 0

    def start(self):
        logf = open(self.log_path, "ab")
        logf.write(f"==== start {self.starts} at {now() - T0:.2f}\n".encode())
        logf.flush()
        self.p = subprocess.Popen(["ip", "netns", "exec", self.ns, *self.argv], stdout=logf, stderr=subprocess.STDOUT,
                                  env=self.env, start_new_session=True)
        logf.close()
        self.expected_exit = False
        self.starts += 1

    @property
    def pid(self):
        return self.p.pid if self.p else None

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            try:
                os.kill(self.p.pid, sig)
            except ProcessLookupError:
                pass

    def kill9(self):
        self.expected_exit = True
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.p:
            self.p.wait()

    def stop(self, timeout=15):
        """SIGCONT + SIGTERM, SIGKILL after `timeout`. Returns the exit status."""
        if not self.p:
            return None
        self.expected_exit = True
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.p.wait()


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


# ---------------------------------------------------------------- the soak

class Soak:
    def __init__(self, a):
        self.a = a
        self.tag = f"h-soak-{os.getpid()}"
        self.hub = f"{self.tag}-hub"
        self.nss = []
        self.procs = []
        self.out = a.out
        os.makedirs(self.out, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="mc-soak.")
        self.bin = os.path.join(os.path.abspath(a.build), "apps")
        self.env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(a.build), "python"))
        self.events_log = []    # applied faults: {kind, node, start, end, ...}
        self.deaths = []        # unexpected exits
        self.health = []        # (t, {node: (http_ok, master_healthy)}, master_ok)
        self.rss_rows = []
        self.lock = threading.Lock()
        self.done = False
        self.cleaned = False

    # -- network
    def setup_net(self):
        sh("ip", "netns", "add", self.hub)
        self.nss.append(self.hub)
        sh("ip", "-n", self.hub, "link", "set", "lo", "up")
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "addr", "add", f"{MASTER_IP}/24", "dev", "br0")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        short = f"sk{os.getpid() % 100000}"
        for i in range(1, self.a.nodes + 1):
            ns = self.ns(i)
            sh("ip", "netns", "add", ns)
            self.nss.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "link", "add", f"{short}v{i}", "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns",
               self.hub)
            sh("ip", "-n", ns, "link", "set", f"{short}v{i}", "name", "eth0")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", self.hub, "link", "set", f"p{i}", "master", "br0")
            sh("ip", "-n", self.hub, "link", "set", f"p{i}", "up")

    def ns(self, i):
        return f"{self.tag}-n{i}"

    def ip(self, i):
        return f"{SUBNET}.{10 + i}"

    # -- processes
    def add(self, name, ns, argv, role):
        p = Proc(name, ns, argv, self.out, env=self.env, role=role)
        self.procs.append(p)
        return p

    def start_cluster(self):
        a = self.a
        self.master = self.add("master", self.hub, [
            f"{self.bin}/mooncake_master", "--deployment_mode", "P2P", "--rpc_address", MASTER_IP, "--rpc_port",
            str(MASTER_PORT), "--metrics_port", str(MASTER_HTTP), "--client_ttl", "3s", "--client_drop_ttl", "20s"],
            "master")
        self.master.start()
        self.nodes = {}
        for i in range(1, a.nodes + 1):
            ssd = os.path.join(self.tmp, f"ssd{i}")
            os.makedirs(ssd, exist_ok=True)
            tiers = {"tiers": [{"type": "DRAM", "capacity": f"{a.dram_mib}MiB", "priority": 100},
                               {"type": "SSD", "capacity": f"{a.ssd_mib}MiB", "priority": 10, "path": ssd}]}
            self.nodes[i] = self.add(f"node{i}", self.ns(i), [
                f"{self.bin}/mooncake_client", "--deployment_mode", "P2P", "--master_server_address",
                f"{MASTER_IP}:{MASTER_PORT}", "--local_hostname", self.ip(i), "--port", str(NODE_TE),
                "--client_rpc_port", str(NODE_RPC), "--http_port", str(NODE_HTTP), "--client_id", f"node{i}",
                "--heartbeat_interval", "500ms", "--rpc_timeout", f"{a.rpc_timeout_ms}ms",
                "--tiered_backend_config", json.dumps(tiers),
                "--max_inflight_keys_per_connection", "32", "--max_inflight_keys_per_peer", "64",
                "--max_inflight_bytes_per_connection", "256MiB", "--max_inflight_bytes_per_peer", "512MiB"], "node")
        for p in self.nodes.values():
            p.start()

    def worker_argv(self, mode, wid, *extra):
        return ["/usr/bin/python3", os.path.join(ROOT, "test", "soak", "worker.py"), mode, "--id", str(wid),
                "--seed", str(self.a.seed), "--workers", str(self.nworkers), "--keys", str(self.a.keys),
                "--rpc_timeout", str(self.a.rpc_timeout_ms), *map(str, extra)]

    def start_workers(self, seconds):
        self.workers = []
        wid = 0
        for j in range(self.a.workers_per_node):
            for i in range(1, self.a.nodes + 1):
                attached = (wid % 2 == 0)
                conn = (["--attach", f"127.0.0.1:{NODE_RPC}"] if attached else
                        ["--master", f"{MASTER_IP}:{MASTER_PORT}", "--ip", self.ip(i)])
                p = self.add(f"w{wid}", self.ns(i), self.worker_argv(
                    "workload", wid, "--seconds", seconds, "--log", os.path.join(self.out, f"ops-w{wid}.jsonl"), *conn),
                    "worker")
                p.node = i
                p.attached = attached
                p.wid = wid
                self.workers.append(p)
                wid += 1
        for p in self.workers:
            p.start()

    # -- probes from inside the hub namespace (a thread that setns()-ed there)
    def probe_loop(self):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = os.open(f"/var/run/netns/{self.hub}", os.O_RDONLY)
        if libc.setns(fd, 0x40000000) != 0:
            log(f"probe: setns failed errno {ctypes.get_errno()}")
            return
        os.close(fd)

        def get(url, timeout=1.0):
            try:
                with urllib.request.urlopen(url, timeout=timeout) as r:
                    return r.status, r.read()
            except Exception as e:  # noqa: BLE001 (any failure is "not healthy")
                code = getattr(e, "code", None)
                return code, b""

        while not self.done:
            t = now()
            st, body = get(f"http://{MASTER_IP}:{MASTER_HTTP}/clients")
            registered = {}
            if st == 200:
                try:
                    for c in json.loads(body).get("clients", []):
                        registered[c.get("client_id")] = c.get("health")
                except ValueError:
                    pass
            nodes = {}
            for i in range(1, self.a.nodes + 1):
                hs, _ = get(f"http://{self.ip(i)}:{NODE_HTTP}/health", timeout=0.5)
                nodes[i] = (hs == 200, registered.get(f"node{i}") == "healthy")
            with self.lock:
                self.health.append((t, nodes, st == 200))
            time.sleep(max(0.0, 0.5 - (now() - t)))

    def healthy(self, target, since):
        """First time >= since when `target` (node i, or 0 for the master with every
        node) was seen healthy by the probe; None if not yet."""
        with self.lock:
            for t, nodes, mok in self.health:
                if t < since:
                    continue
                if target == 0:
                    if mok and all(a and b for a, b in nodes.values()):
                        return t
                elif nodes[target][0] and nodes[target][1]:
                    return t
        return None

    # -- faults
    def apply(self, ev):
        k, i = ev["kind"], ev["node"]
        rec = dict(ev, start=now())
        log(f"fault {k} node{i} dur {ev['dur']:.1f}s" + (f" {ev.get('pct', '')}{'%' if 'pct' in ev else ''}"
                                                         f"{ev.get('mbit', '')}{'mbit' if 'mbit' in ev else ''}"))
        ns = self.ns(i) if i else None
        if k == "kill":
            self.nodes[i].kill9()
        elif k == "master":
            self.master.kill9()
        elif k == "stop":
            self.nodes[i].signal(signal.SIGSTOP)
        elif k == "partition":
            sh("ip", "-n", self.hub, "link", "set", f"p{i}", "down")
        elif k == "loss":
            for hook in ("input", "output"):
                rule = f"add table inet soak; add chain inet soak {hook} {{ type filter hook {hook} priority 0; }}; " \
                       f"add rule inet soak {hook} {'iif' if hook == 'input' else 'oif'}name eth0 " \
                       f"numgen random mod 100 < {ev['pct']} drop"
                sh("ip", "netns", "exec", ns, "nft", rule)
        elif k == "rate":
            for n, dev in ((ns, "eth0"), (self.hub, f"p{i}")):
                sh("ip", "netns", "exec", n, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                   f"{ev['mbit']}mbit", "burst", "64kb", "latency", "200ms")
        elif k == "fill":
            cap = (self.a.dram_mib + self.a.ssd_mib) << 20
            p = self.add(f"fill{len(self.events_log)}", ns, self.worker_argv(
                "fill", i, "--attach", f"127.0.0.1:{NODE_RPC}", "--bytes", int(cap * 1.15), "--hold", 2,
                "--seconds", 12, "--log", os.path.join(self.out, f"fill-{len(self.events_log)}.jsonl")), "fill")
            p.start()
            rec["proc"] = p
        self.events_log.append(rec)
        return rec

    def heal(self, rec):
        k, i = rec["kind"], rec["node"]
        ns = self.ns(i) if i else None
        if k == "kill":
            self.nodes[i].start()
        elif k == "master":
            self.master.start()
        elif k == "stop":
            self.nodes[i].signal(signal.SIGCONT)
        elif k == "partition":
            sh("ip", "-n", self.hub, "link", "set", f"p{i}", "up")
        elif k == "loss":
            sh("ip", "netns", "exec", ns, "nft", "delete table inet soak", check=False)
        elif k == "rate":
            for n, dev in ((ns, "eth0"), (self.hub, f"p{i}")):
                sh("ip", "netns", "exec", n, "tc", "qdisc", "del", "dev", dev, "root", check=False)
        elif k == "fill":
            p = rec.pop("proc")
            if p.alive():
                p.stop()
            rec["fill_rc"] = p.p.returncode
        rec["end"] = now()
        log(f"healed {k} node{i}")

    # -- monitoring
    def sample(self):
        t = now() - T0
        for p in self.procs:
            if p.alive() and p.role in ("node", "master", "worker"):
                r = rss_kib(p.pid)
                if r is not None:
                    self.rss_rows.append((round(t, 2), p.name, p.pid, r))

    def live_check(self):
        """The analyzer over the logs so far (reads that returned 20 s ago or
        more: every write they may have seen is logged by then)."""
        try:
            faults = [{k: v for k, v in r.items() if k != "proc"} for r in list(self.events_log)]
            attached = {p.wid: (p.node if p.attached else None) for p in self.workers}
            an = analyze.Analyzer(self.out, faults, attached, max(10.0, 3 * self.a.rpc_timeout_ms / 1000.0),
                                  upto=now() - 20.0)
            an.check()
            n = sum(sum(o.values()) for o in an.outcomes.values())
            self.live_violations = len(an.violations)
            log(f"live check: {n} key-operations logged, {len(an.violations)} violations so far")
            for v in an.violations[:5]:
                log(f"  VIOLATION {v['kind']}: {v['detail']}")
        except Exception as e:  # noqa: BLE001 (the final analysis still runs)
            log(f"live check failed: {e}")

    def check_deaths(self):
        for p in self.procs:
            if p.p is not None and not p.expected_exit and p.p.poll() is not None and p.role in ("node", "master",
                                                                                              "worker"):
                rc = p.p.returncode
                if p.role == "worker" and rc == 0:
                    p.expected_exit = True  # its time was up
                    continue
                tail = open(p.log_path, "rb").read()[-1500:].decode(errors="replace")
                self.deaths.append({"name": p.name, "rc": rc, "t": now() - T0, "tail": tail})
                log(f"UNEXPECTED EXIT {p.name} status {rc}")
                p.expected_exit = True
                if p.role in ("node", "master"):
                    p.start()

    def wait_ready(self, timeout=60):
        deadline = now() + timeout
        while now() < deadline:
            if self.healthy(0, now() - 1.0) is not None:
                return True
            time.sleep(0.3)
        return False

    def run(self):
        a = self.a
        total = a.minutes * 60.0
        warmup, cooldown = min(15.0, total * 0.1), min(40.0, max(20.0, total * 0.1))
        chaos_end = total - cooldown
        overload_at = chaos_end * 0.55 if a.overload_threads else None
        overload_len = a.overload_seconds
        self.nworkers = a.nodes * a.workers_per_node
        sched = make_schedule(a.seed, a.nodes, warmup, chaos_end, overload_at, overload_len)
        self.schedule = sched
        log(f"seed {a.seed}; {a.nodes} nodes, {self.nworkers} workers, {total:.0f} s "
            f"(chaos {warmup:.0f}..{chaos_end:.0f} s, overload at {overload_at and round(overload_at)} s)")
        log("schedule (seconds after the workload starts):")
        for ev in sched:
            log("  " + json.dumps(ev))
        with open(os.path.join(self.out, "schedule.json"), "w") as f:
            json.dump({"seed": a.seed, "events": sched, "workload_sha256": analyze.plan_digest(
                a.seed, self.nworkers, a.keys, 200)}, f, indent=1)
        self.setup_net()
        self.start_cluster()
        threading.Thread(target=self.probe_loop, daemon=True).start()
        if not self.wait_ready():
            raise RuntimeError("the cluster did not become healthy in 60 s")
        log("cluster healthy; starting the workload")
        self.w0 = now()
        self.start_workers(total + 120)
        pending = list(sched)
        active = []
        overload_procs = []
        overload_done = overload_at is None
        last_sample = 0.0
        last_live = now()
        live = None
        while True:
            t = now() - self.w0
            if t >= total:
                break
            while pending and pending[0]["t"] <= t:
                active.append(self.apply(pending.pop(0)))
            for rec in list(active):
                over = now() - rec["start"] >= rec["dur"]
                if rec["kind"] == "fill":
                    over = over or not rec["proc"].alive()
                if over:
                    self.heal(rec)
                    active.remove(rec)
            if not overload_done and t >= overload_at:
                overload_done = True
                log(f"overload phase: {a.overload_threads} requesters per node for {overload_len:.0f} s")
                for i in range(1, a.nodes + 1):
                    p = self.add(f"overload{i}", self.ns(i), self.worker_argv(
                        "overload", i, "--attach", f"127.0.0.1:{NODE_RPC}", "--master", f"{MASTER_IP}:{MASTER_PORT}",
                        "--ip", self.ip(i), "--threads", a.overload_threads, "--seconds", overload_len,
                        "--log", os.path.join(self.out, f"overload-{i}.jsonl")), "overload")
                    p.start()
                    overload_procs.append(p)
            if now() - last_live >= a.live_every and (live is None or not live.is_alive()):
                last_live = now()
                live = threading.Thread(target=self.live_check, daemon=True)
                live.start()
            if now() - last_sample >= 1.0:
                last_sample = now()
                self.sample()
                self.check_deaths()
            time.sleep(0.05)
        for rec in active:
            self.heal(rec)
        for p in overload_procs:
            try:
                p.p.wait(timeout=max(5.0, overload_len + 30))
            except subprocess.TimeoutExpired:
                self.deaths.append({"name": p.name, "rc": None, "t": now() - T0, "tail": "overload worker hung"})
                p.stop()
        self.check_deaths()
        log("chaos over; stopping the workload")
        for p in self.workers:
            rc = p.stop(timeout=30)
            if rc not in (0, None) and not any(d["name"] == p.name for d in self.deaths):
                self.deaths.append({"name": p.name, "rc": rc, "t": now() - T0, "tail": "exit status at stop"})
        t_stop = now()
        ready = self.wait_ready(60)
        self.heal_time = (self.healthy(0, t_stop) or now()) - t_stop
        log(f"cluster healthy {self.heal_time:.2f} s after the workload stopped ({'ok' if ready else 'NOT READY'})")
        v = self.add("verify", self.hub, self.worker_argv(
            "verify", 999, "--master", f"{MASTER_IP}:{MASTER_PORT}", "--ip", MASTER_IP, "--seconds",
            a.recover_seconds, "--log", os.path.join(self.out, "verify.jsonl")), "verify")
        v.start()
        try:
            v.p.wait(timeout=a.recover_seconds + 60)
        except subprocess.TimeoutExpired:
            self.deaths.append({"name": "verify", "rc": None, "t": now() - T0, "tail": "verify hung"})
            v.stop()
        self.sample()
        self.check_deaths()
        log("verification done; stopping the cluster")
        # Every node at once (none waits for a peer that already left), then the master.
        self.stops = []
        t = now()
        for p in self.nodes.values():
            p.expected_exit = True
            p.signal(signal.SIGTERM)
        left = dict(self.nodes)
        while left and now() - t < 30:
            for i, p in list(left.items()):
                if p.p.poll() is not None:
                    self.stops.append((p.name, p.p.returncode, now() - t))
                    del left[i]
            time.sleep(0.02)
        for p in left.values():
            p.signal(signal.SIGKILL)
            self.stops.append((p.name, p.p.wait(), now() - t))
        t = now()
        rc = self.master.stop(timeout=30)
        self.stops.append(("master", rc, now() - t))

    def cleanup(self):
        if self.cleaned:
            return
        self.cleaned = True
        self.done = True
        for p in reversed(self.procs):
            if p.p is not None and p.alive():
                p.stop(timeout=10)
        for ns in reversed(self.nss):
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--workers-per-node", type=int, default=2)
    ap.add_argument("--keys", type=int, default=48, help="keys per workload worker")
    ap.add_argument("--dram-mib", type=int, default=64)
    ap.add_argument("--ssd-mib", type=int, default=256)
    ap.add_argument("--rpc-timeout-ms", type=int, default=3000)
    ap.add_argument("--overload-threads", type=int, default=64)
    ap.add_argument("--overload-seconds", type=float, default=30)
    ap.add_argument("--recover-seconds", type=float, default=30)
    ap.add_argument("--live-every", type=float, default=60, help="seconds between live invariant checks")
    ap.add_argument("--print-schedule", action="store_true", help="print the schedule of SEED and MINUTES and exit")
    ap.add_argument("--quick", action="store_true",
                    help="the short deterministic run: 2 minutes, seed 1 (every fault kind), one workload per node, "
                         "32 keys each, 16 overload requesters per node for 15 s, 15 s to recover")
    a = ap.parse_args()
    if a.quick:
        a.minutes, a.workers_per_node, a.keys, a.overload_threads, a.overload_seconds = 2, 1, 32, 16, 15
        a.recover_seconds = 15
        if a.seed is None:
            a.seed = 1
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    if a.print_schedule:
        total = a.minutes * 60.0
        warmup, cooldown = min(15.0, total * 0.1), min(40.0, max(20.0, total * 0.1))
        ce = total - cooldown
        nw = a.nodes * a.workers_per_node
        for ev in make_schedule(a.seed, a.nodes, warmup, ce, ce * 0.55 if a.overload_threads else None,
                                a.overload_seconds):
            print(json.dumps(ev))
        print("workload sha256", analyze.plan_digest(a.seed, nw, a.keys, 200))
        return 0
    if os.geteuid() != 0:
        print("soak: needs root (network namespaces)", file=sys.stderr)
        return 77
    for tool in ("ip", "nft", "tc"):
        if shutil.which(tool) is None:
            print(f"soak: {tool} is missing (bash scripts/install-deps.sh)", file=sys.stderr)
            return 77
    if a.out is None:
        a.out = os.path.join(ROOT, "build", "soak", time.strftime("%Y%m%d-%H%M%S") + f"-seed{a.seed}")
    s = Soak(a)
    atexit.register(s.cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(130))
    err = None
    try:
        s.run()
    except Exception as e:  # noqa: BLE001 (reported, then cleaned up)
        import traceback
        traceback.print_exc()
        err = str(e)
    s.done = True
    rep = analyze.Report(a, s, err)
    s.cleanup()
    ok = rep.write()
    log(f"report: {os.path.join(a.out, 'report.md')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
