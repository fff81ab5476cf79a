#!/usr/bin/env python3
"""Chaos soak of mooncake-p2p (`make soak [MINUTES=N] [SEED=S]`; test/soak/README.md).

Masters and NODES mooncake_client nodes (DRAM + SSD tiers), each node in its
own network namespace joined by a veth pair to a bridge in a hub namespace
(10.231.0.0/24, inside those namespaces only). With etcd installed (and no
--no-ha) the hub runs one etcd member and two masters with --ha_backend etcd
(leader election; clients follow etcd://); without, one master. Workload
processes (test/soak/worker.py: the Python API, attached to a node or pure
clients) in the node namespaces; a chaos driver that follows a schedule made
from SEED (kill -9 / restart of nodes, kill -9 or SIGSTOP of the leading master
(HA) or kill -9 / restart of the master, SIGSTOP / SIGCONT, partitions, packet
loss with nftables, rate limits with tc tbf, SSD fills, an overload phase);
invariant checks (analyze.py) while it runs and at the end; failover times per
leader fault; a report in OUT/report.md. Exit status 0 only with no
violation. Root only; cleans up its namespaces and the processes it started
(by PID) on any exit.
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
# HA: two masters in the hub (RPC, HTTP), one etcd member (client, peer port).
HA_MASTERS = [(50051, 9003), (50061, 9013)]
ETCD_PORT, ETCD_PEER = 2379, 2380
HA_LEASE = "2s"
# Seconds a leader fault is given after its end for the election and the
# rebuild (lease 2 s; a new leader may wait for a dead client's record to
# lapse: max(client_ttl, 3 leases) = 6 s): no other master fault, no overload
# phase and no end of the chaos inside it.
FAILOVER_ALLOW = 10.0
# Seconds after the overload phase's nominal end in which no fault starts
# either: the requesters start a moment late and finish the operations in
# flight (a node killed 0.6 s after the nominal end failed 1,347 requests of
# its requesters with RPC_FAIL, counted as overload violations: seed 31,
# 2026-12-04). Short, so that the 2-minute QUICK schedule keeps every fault
# kind; an operation still in flight longer than this can still meet a fault.
OVERLOAD_TAIL = 3.0
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


def make_schedule(seed, nodes, warmup, chaos_end, overload_at, overload_len, ha=False):
    """The fault schedule: a pure function of its arguments. Each event:
    {t, kind, node (1-based, 0 for the master), dur, ...}; a master event has
    `action`: "kill" or "stop" of the leader with HA, "restart" without. At
    most two faults at once, one per node, none during the overload window (and OVERLOAD_TAIL after it); a
    master event also keeps FAILOVER_ALLOW seconds after its end free of
    another master event, of the overload phase and of the end of the chaos."""
    rng = random.Random(f"soak-schedule-{seed}")
    # The leader faults' actions (and a SIGSTOP's length) come from a stream of
    # their own, dealt from a deck: any two leader faults in a row are one kill
    # and one SIGSTOP.
    lrng = random.Random(f"soak-leader-{seed}")
    ldeck = []
    events = []
    busy = {}  # target -> busy until
    t = warmup
    # Kinds are dealt from a deck: every kind once (the master twice: with HA a
    # leader kill and a leader SIGSTOP) in a seeded order before the weighted
    # ones, so even a short run has each fault; a kind that does not fit now
    # stays on top of the deck.
    deck = [k for k, _ in KINDS] + ["master"]
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
        if kind == "master":
            if not ha:
                ev["action"] = "restart"
            else:
                if not ldeck:
                    ldeck = ["kill", "stop"]
                    lrng.shuffle(ldeck)
                ev["action"] = ldeck[0]
                if ldeck[0] == "stop":
                    # 1-8 s: shorter than the 2 s lease the leader may keep it.
                    ev["dur"] = round(lrng.uniform(1.0, 8.0), 3)
        if kind == "loss":
            ev["pct"] = rng.choice([2, 5, 10, 20, 35])
        if kind == "rate":
            ev["mbit"] = rng.choice([1, 4, 16, 64])
        if kind == "fill":
            ev["dur"] = 15.0  # the fill's length bound (the worker ends it sooner)
        end = t + ev["dur"]
        reach = end + (FAILOVER_ALLOW if kind == "master" else 0.0)  # until its effects are over
        if reach > chaos_end:
            continue
        if overload_at is not None and t < overload_at + overload_len + OVERLOAD_TAIL and reach > overload_at - 2:
            continue
        active = [e for e in events if e["t"] + e["dur"] > t]
        if len(active) >= 2 or busy.get(target, -1) > t:
            continue
        if kind == "master" and any(e["kind"] == "master" for e in active):
            continue
        busy[target] = reach + 1.0
        events.append(ev)
        deck.pop(0)
        if kind == "master" and ha:
            ldeck.pop(0)
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
        # etcd's data on tmpfs when there is one (fsyncs cost nothing there).
        self.tmp_fast = tempfile.mkdtemp(prefix="mc-soak-etcd.", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.ha = a.ha
        self.cluster_id = f"soak{os.getpid()}"
        if self.ha:
            self.master_addr = f"etcd://{MASTER_IP}:{ETCD_PORT}"
            self.master_ports = list(HA_MASTERS)
        else:
            self.master_addr = f"{MASTER_IP}:{MASTER_PORT}"
            self.master_ports = [(MASTER_PORT, MASTER_HTTP)]
        self.masters = []
        self.etcd = None
        # HA: each master's /health every 100 ms: name -> [(t, role or None, term)].
        self.mhealth = {}
        self.mstate = {}  # name -> (t, role, term): the latest sample
        self.bin = os.path.join(os.path.abspath(a.build), "apps")
        self.env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(a.build), "python"))
        self.events_log = []    # applied faults: {kind, node, start, end, ...}
        self.deaths = []        # unexpected exits
        self.health = []        # (t, {node: (http_ok, master_healthy)}, master_ok)
        self.failover_log = []  # leader faults: what the chaos found at the time (leader, term)
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

    def etcdctl(self, *args, timeout=5):
        """etcdctl (v3) against the soak's etcd, from inside the hub."""
        try:
            return subprocess.run(["ip", "netns", "exec", self.hub, "etcdctl", "--endpoints",
                                   f"{MASTER_IP}:{ETCD_PORT}", "--dial-timeout", "1s", "--command-timeout", "2s",
                                   *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, ETCDCTL_API="3"), timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def start_etcd(self):
        client, peer = f"http://{MASTER_IP}:{ETCD_PORT}", f"http://127.0.0.1:{ETCD_PEER}"
        self.etcd = self.add("etcd", self.hub, [
            shutil.which("etcd"), "--name", "soak", "--data-dir", os.path.join(self.tmp_fast, "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer, "--initial-cluster", f"soak={peer}",
            "--heartbeat-interval", "50", "--election-timeout", "250", "--log-level", "warn"], "etcd")
        self.etcd.start()
        deadline = now() + 30
        while now() < deadline:
            if not self.etcd.alive():
                break
            r = self.etcdctl("endpoint", "health")
            if r is not None and r.returncode == 0:
                log(f"etcd up at {client} (data in {self.tmp_fast})")
                return
            time.sleep(0.2)
        tail = open(self.etcd.log_path, "rb").read()[-1500:].decode(errors="replace")
        raise RuntimeError(f"etcd did not start:\n{tail}")

    def master_argv(self, i):
        rpc, http = self.master_ports[i]
        argv = [f"{self.bin}/mooncake_master", "--deployment_mode", "P2P", "--rpc_address", MASTER_IP, "--rpc_port",
                str(rpc), "--metrics_port", str(http), "--client_ttl", "3s", "--client_drop_ttl", "20s"]
        if self.ha:
            argv += ["--ha_backend", "etcd", "--etcd_endpoints", f"{MASTER_IP}:{ETCD_PORT}", "--cluster_id",
                     self.cluster_id, "--ha_lease_ttl", HA_LEASE, "--ha_advertise_address", f"{MASTER_IP}:{rpc}"]
        return argv

    def start_cluster(self):
        a = self.a
        if self.ha:
            self.start_etcd()
            for i in range(len(self.master_ports)):
                self.masters.append(self.add(f"master{i}", self.hub, self.master_argv(i), "master"))
                self.mhealth[f"master{i}"] = []
            for i, m in enumerate(self.masters):
                threading.Thread(target=self.master_poll, args=(i,), daemon=True).start()
            # master0 first, so that it usually leads at first; then the standby.
            self.masters[0].start()
            deadline = now() + 20
            while now() < deadline and self.leader() is None:
                time.sleep(0.1)
            for m in self.masters[1:]:
                m.start()
        else:
            self.masters.append(self.add("master", self.hub, self.master_argv(0), "master"))
            self.masters[0].start()
        self.master = self.masters[0]
        self.nodes = {}
        for i in range(1, a.nodes + 1):
            ssd = os.path.join(self.tmp, f"ssd{i}")
            os.makedirs(ssd, exist_ok=True)
            tiers = {"tiers": [{"type": "DRAM", "capacity": f"{a.dram_mib}MiB", "priority": 100},
                               {"type": "SSD", "capacity": f"{a.ssd_mib}MiB", "priority": 10, "path": ssd}]}
            self.nodes[i] = self.add(f"node{i}", self.ns(i), [
                f"{self.bin}/mooncake_client", "--deployment_mode", "P2P", "--master_server_address",
                self.master_addr, *(["--cluster_id", self.cluster_id] if self.ha else []), "--local_hostname",
                self.ip(i), "--port", str(NODE_TE),
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
                "--rpc_timeout", str(self.a.rpc_timeout_ms), *(["--cluster_id", self.cluster_id] if self.ha else []),
                *(["--focus", self.a.focus] if self.a.focus and mode == "workload" else []), *map(str, extra)]

    def start_workers(self, seconds):
        self.workers = []
        wid = 0
        for j in range(self.a.workers_per_node):
            for i in range(1, self.a.nodes + 1):
                attached = (wid % 2 == 0)
                conn = (["--attach", f"127.0.0.1:{NODE_RPC}"] if attached else
                        ["--master", self.master_addr, "--ip", self.ip(i)])
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

    # -- probes from inside the hub namespace (threads that setns()-ed there)
    def enter_hub(self, who):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = os.open(f"/var/run/netns/{self.hub}", os.O_RDONLY)
        ok = libc.setns(fd, 0x40000000) == 0
        os.close(fd)
        if not ok:
            log(f"{who}: setns failed errno {ctypes.get_errno()}")
        return ok

    @staticmethod
    def http_get(url, timeout=1.0):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return r.status, r.read()
        except Exception as e:  # noqa: BLE001 (any failure is "not healthy")
            code = getattr(e, "code", None)
            return code, b""

    def master_poll(self, i):
        """HA: master i's /health every 100 ms (its role and term); a frozen or
        dead master is a sample with no role."""
        name = f"master{i}"
        if not self.enter_hub(f"poll {name}"):
            return
        url = f"http://{MASTER_IP}:{self.master_ports[i][1]}/health"
        while not self.done:
            t = now()
            st, body = self.http_get(url, timeout=0.5)
            role, term = None, None
            if st in (200, 503):  # a standby answers 503 with its role
                try:
                    j = json.loads(body)
                    role, term = j.get("role"), int(j.get("term", 0))
                except ValueError:
                    pass
            sample = (now(), role, term)
            with self.lock:
                self.mhealth[name].append(sample)
                self.mstate[name] = sample
            time.sleep(max(0.0, 0.1 - (now() - t)))

    def leader(self, roles=("leader", "rebuilding"), fresh=1.0):
        """HA: (index, role, term) of the master whose latest /health (at most
        `fresh` s old) names one of `roles`, the highest term if several; None."""
        best = None
        with self.lock:
            for i in range(len(self.masters)):
                smp = self.mstate.get(f"master{i}")
                if smp and smp[1] in roles and now() - smp[0] <= fresh and (best is None or smp[2] > best[2]):
                    best = (i, smp[1], smp[2])
        return best

    NODE_METRICS = ("mc_client_registered", "mc_client_master_errors_total", "mc_client_resyncs_total",
                    "mc_client_superseded_drops_total", "mc_client_stale_publishes_total",
                    "mc_client_failed_publishes_total")

    def probe_loop(self):
        """Every 500 ms: the (leading) master's /clients and each node's /health;
        every 2 s also each node's registration counters from its /metrics. All
        of it goes to probe.jsonl too (diagnosis: who was registered when)."""
        if not self.enter_hub("probe"):
            return
        get = self.http_get
        plog = open(os.path.join(self.out, "probe.jsonl"), "a", buffering=1 << 16)
        rounds = 0
        while not self.done:
            t = now()
            ld = None
            if self.ha:
                ld = self.leader(roles=("leader",))
                st, body = get(f"http://{MASTER_IP}:{self.master_ports[ld[0]][1]}/clients") if ld else (None, b"")
            else:
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
            rec = {"t": round(t, 3), "leader": f"master{ld[0]}" if ld else None, "master_ok": st == 200,
                   "clients": registered, "node_http": {i: v[0] for i, v in nodes.items()}}
            if rounds % 4 == 0:
                rec["node_metrics"] = {}
                for i in range(1, self.a.nodes + 1):
                    ms, body = get(f"http://{self.ip(i)}:{NODE_HTTP}/metrics", timeout=0.5)
                    if ms == 200:
                        vals = {}
                        for line in body.decode(errors="replace").splitlines():
                            name, _, v = line.partition(" ")
                            if name in self.NODE_METRICS:
                                vals[name[len("mc_client_"):]] = v.strip()
                        rec["node_metrics"][i] = vals
            rounds += 1
            plog.write(json.dumps(rec, separators=(",", ":")) + "\n")
            time.sleep(max(0.0, 0.5 - (now() - t)))
        plog.close()

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
        log(f"fault {k}{' ' + ev['action'] if 'action' in ev else ''} {'node%d' % i if i else 'master'} "
            f"dur {ev['dur']:.1f}s" + (f" {ev.get('pct', '')}{'%' if 'pct' in ev else ''}"
                                      f"{ev.get('mbit', '')}{'mbit' if 'mbit' in ev else ''}"))
        ns = self.ns(i) if i else None
        if k == "kill":
            self.nodes[i].kill9()
        elif k == "master":
            self.apply_master(ev, rec)
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
            m = self.masters[rec["victim"]] if rec.get("victim") is not None else None
            if m is not None and rec["action"] in ("kill", "restart"):
                m.start()
            elif m is not None:
                m.signal(signal.SIGCONT)
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
        log(f"healed {k} {'node%d' % i if i else rec.get('victim_name') or 'master'}")

    def apply_master(self, ev, rec):
        """The master fault: without HA kill -9 of the master (restarted at the
        end); with HA kill -9 (restarted at the end: a standby) or SIGSTOP
        (SIGCONT at the end) of the master that leads now."""
        rec["action"] = ev.get("action", "restart")
        if not self.ha:
            rec["victim"], rec["victim_name"] = 0, self.masters[0].name
            self.masters[0].kill9()
            return
        ld = self.leader()
        how = "health"
        if ld is None:  # no fresh /health names one: ask etcd who holds the leader key
            how = "etcd"
            r = self.etcdctl("get", "--print-value-only", f"mooncake-store/{self.cluster_id}/master_view")
            addr = r.stdout.strip() if r is not None and r.returncode == 0 else ""
            for i, (rpc, _) in enumerate(self.master_ports):
                if addr == f"{MASTER_IP}:{rpc}":
                    ld = (i, None, None)
        if ld is None:
            rec["victim"], rec["victim_name"] = None, None
            log("  no leader known (neither /health nor etcd): nothing to do")
            self.failover_log.append({"t": rec["start"], "action": rec["action"], "leader": None})
            return
        i, role, term = ld
        rec["victim"], rec["victim_name"], rec["term"], rec["role"], rec["found_by"] = i, f"master{i}", term, role, how
        log(f"  leader: master{i} (role {role}, term {term}, from {how}): {rec['action']}")
        if rec["action"] == "kill":
            self.masters[i].kill9()
        else:
            self.masters[i].signal(signal.SIGSTOP)
        self.failover_log.append({"t": rec["start"], "action": rec["action"], "leader": f"master{i}", "term": term})

    # -- monitoring
    def sample(self):
        t = now() - T0
        for p in self.procs:
            if p.alive() and p.role in ("node", "master", "worker", "etcd"):
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
            if p.p is not None and not p.expected_exit and p.p.poll() is not None and p.role in (
                    "node", "master", "worker", "etcd"):
                rc = p.p.returncode
                if p.role == "worker" and rc == 0:
                    p.expected_exit = True  # its time was up
                    continue
                tail = open(p.log_path, "rb").read()[-1500:].decode(errors="replace")
                self.deaths.append({"name": p.name, "rc": rc, "t": now() - T0, "tail": tail})
                log(f"UNEXPECTED EXIT {p.name} status {rc}")
                p.expected_exit = True
                if p.role in ("node", "master", "etcd"):
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
        sched = make_schedule(a.seed, a.nodes, warmup, chaos_end, overload_at, overload_len, self.ha)
        self.schedule = sched
        log(f"seed {a.seed}; {a.nodes} nodes, {self.nworkers} workers, {total:.0f} s "
            f"(chaos {warmup:.0f}..{chaos_end:.0f} s, overload at {overload_at and round(overload_at)} s)")
        log(f"masters: {a.ha_note}")
        log("schedule (seconds after the workload starts):")
        for ev in sched:
            log("  " + json.dumps(ev))
        with open(os.path.join(self.out, "schedule.json"), "w") as f:
            json.dump({"seed": a.seed, "ha": self.ha, "focus": a.focus, "events": sched,
                       "workload_sha256": analyze.plan_digest(a.seed, self.nworkers, a.keys, 200, a.focus)}, f,
                      indent=1)
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
                        "overload", i, "--attach", f"127.0.0.1:{NODE_RPC}", "--master", self.master_addr,
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
            "verify", 999, "--master", self.master_addr, "--ip", MASTER_IP, "--seconds",
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
        # The masters: with HA the standby first, then the leader (it resigns).
        ld = self.leader() if self.ha else None
        order = sorted(range(len(self.masters)), key=lambda i: ld is not None and i == ld[0])
        for i in order:
            t = now()
            rc = self.masters[i].stop(timeout=30)
            self.stops.append((self.masters[i].name, rc, now() - t))
        if self.etcd is not None:
            self.etcd.stop(timeout=10)

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
        shutil.rmtree(self.tmp_fast, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--workers-per-node", type=int, default=2)
    ap.add_argument("--keys", type=int, default=48, help="keys per workload worker")
    ap.add_argument("--focus", default=None, help="an operation the workload does ten times as often (bug hunting)")
    ap.add_argument("--dram-mib", type=int, default=64)
    ap.add_argument("--ssd-mib", type=int, default=256)
    ap.add_argument("--rpc-timeout-ms", type=int, default=3000)
    ap.add_argument("--overload-threads", type=int, default=64)
    ap.add_argument("--overload-seconds", type=float, default=30)
    ap.add_argument("--recover-seconds", type=float, default=30)
    ap.add_argument("--live-every", type=float, default=60, help="seconds between live invariant checks")
    ap.add_argument("--print-schedule", action="store_true", help="print the schedule of SEED and MINUTES and exit")
    ap.add_argument("--no-ha", action="store_true",
                    help="one master even when etcd is installed (default: two masters with HA on etcd if it is)")
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
    etcd_bins = [b for b in ("etcd", "etcdctl") if shutil.which(b) is None]
    a.ha = not a.no_ha and not etcd_bins
    a.ha_note = (f"two, HA on etcd (one etcd member in the hub, lease {HA_LEASE}; clients follow etcd://)" if a.ha
                 else "one, no HA (" + ("--no-ha" if a.no_ha else " and ".join(etcd_bins) + " not installed") + ")")
    if a.print_schedule:
        total = a.minutes * 60.0
        warmup, cooldown = min(15.0, total * 0.1), min(40.0, max(20.0, total * 0.1))
        ce = total - cooldown
        nw = a.nodes * a.workers_per_node
        print(f"masters: {a.ha_note}")
        for ev in make_schedule(a.seed, a.nodes, warmup, ce, ce * 0.55 if a.overload_threads else None,
                                a.overload_seconds, a.ha):
            print(json.dumps(ev))
        print("workload sha256", analyze.plan_digest(a.seed, nw, a.keys, 200, a.focus))
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
