"""A workload process of the chaos soak (scripts/soak.py starts it inside a
node's network namespace). Modes:

  workload  puts/upserts/gets/batches/removes on its own keys w<ID>/k<NNN>,
            gets of every worker's keys; one JSON line per operation
  fill      attaches to its node and upserts fill keys until the tiers
            (DRAM + SSD) overflowed, holds, then removes them
  overload  seeds keys on its node, then THREADS requesters at once against it
  verify    after the chaos: reads every key until it is found or the time is up

The operation sequence of a workload is a pure function of (seed, worker id)
(`plan`): outcomes never change which operation comes next. Every value is
checked when read (values.py): a torn, foreign or garbage value is logged as
a violation at once; freshness is judged by the soak's analyzer from every
worker's log. Times are CLOCK_MONOTONIC, the same in every namespace.
"""
import argparse
import ctypes
import faulthandler
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import values  # noqa: E402

MAX_VALUE = 6 * 1024 * 1024 + 13
SLOT = MAX_VALUE
MAX_BATCH = 5
OK, NOT_FOUND, OVERLOADED, TIMEOUT = 0, -704, -1107, -1100

STOP = False


def on_term(*_):
    global STOP
    STOP = True


def key_of(w, i):
    return f"w{w}/k{i:03d}"


def pick_size(rng, key):
    """1 B .. 6 MiB + 13, odd sizes, around the 64 KiB inline threshold too."""
    b = rng.random()
    h = values.header_len(key)
    if b < 0.08:
        return rng.randint(1, h - 1)
    if b < 0.38:
        return rng.randint(h, 4096)
    if b < 0.48:
        return rng.choice([65535, 65536, 65537, 65536 - 31, 65536 + 4093])
    if b < 0.65:
        return rng.randint(4097, 200_000)
    if b < 0.90:
        return rng.randint(200_001, 1 << 20)
    return rng.randint((1 << 20) + 1, MAX_VALUE)


def plan(seed, wid, nworkers, nkeys, focus=None):
    """The operation sequence of worker `wid`: an endless generator of dicts
    {op, keys, versions (writes), sizes (writes), think}. Versions count per key.
    `focus`: an operation made ten times as likely (to hunt a bug in it)."""
    rng = random.Random(f"soak-{seed}-w{wid}")
    ver = [0] * nkeys
    ops = [("get", 30), ("batch_get", 12), ("get_batch", 3), ("upsert", 16), ("put", 5), ("batch_upsert", 9),
           ("batch_put", 3), ("upsert_parts", 4), ("remove", 6), ("batch_remove", 3), ("exists", 5)]
    ops = [(o, w * 10 if o == focus else w) for o, w in ops]
    names = [o for o, _ in ops]
    weights = [w for _, w in ops]
    while True:
        op = rng.choices(names, weights)[0]
        think = rng.random() * 0.03
        if op in ("get", "batch_get", "get_batch", "exists"):
            n = 1 if op in ("get", "exists") else rng.randint(2, MAX_BATCH)
            keys = []
            for _ in range(n):
                w = wid if rng.random() < 0.5 else rng.randrange(nworkers)
                keys.append(key_of(w, rng.randrange(nkeys)))
            yield {"op": op, "keys": keys, "think": think}
            continue
        n = 1 if op in ("upsert", "put", "upsert_parts", "remove") else rng.randint(2, 4)
        idx = rng.sample(range(nkeys), n)
        vs, sizes = [], []
        for i in idx:
            ver[i] += 1
            vs.append(ver[i])
            sizes.append(0 if "remove" in op else pick_size(rng, key_of(wid, i)))
        yield {"op": op, "keys": [key_of(wid, i) for i in idx], "versions": vs, "sizes": sizes, "think": think}


def addr_of(buf):
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1 << 16)
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def write(self, rec):
        with self.lock:
            self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            now = time.monotonic()
            if now - self.last > 0.5:
                self.f.flush()
                self.last = now

    def flush(self):
        with self.lock:
            self.f.flush()

    def close(self):
        self.f.flush()
        self.f.close()


def new_store():
    from mooncake_p2p import MooncakeDistributedStore
    return MooncakeDistributedStore()


def connect(args, log):
    """A store of this worker's kind; retries until it works or we are told to stop."""
    t0 = time.monotonic()
    tries = 0
    while not STOP:
        tries += 1
        s = new_store()
        if args.attach:
            rc = s.setup_dummy(0, 16 << 20, args.attach)
        else:
            cfg = {"local_hostname": args.ip, "metadata_server": "P2PHANDSHAKE", "global_segment_size": 0,
                   "local_buffer_size": 16 << 20, "protocol": "tcp", "master_server_addr": args.master,
                   "heartbeat_interval": "500ms", "rpc_timeout": f"{args.rpc_timeout}ms"}
            if args.cluster_id:  # an etcd://... master address: the cluster whose leader to follow
                cfg["cluster_id"] = args.cluster_id
            rc = s.setup(cfg)
        if rc == 0:
            log.write({"op": "connect", "t0": t0, "t1": time.monotonic(), "tries": tries})
            return s
        s.close()
        time.sleep(0.3)
    return None


def check_read(key, data, bad):
    """('v', version) / ('tiny', hex) / ('bad', reason) of bytes read for key."""
    kind, v = values.decode(key, data)
    if kind == "ok":
        return v
    if kind == "tiny":
        return "tiny:" + bytes(data).hex()
    bad.append(f"{key}: {v}")
    print(f"VIOLATION {key}: {v}", file=sys.stderr, flush=True)
    return None


def run_op(s, o, rbuf, wbuf):
    """Runs one planned operation; returns the fields to log."""
    op, keys = o["op"], o["keys"]
    bad = []
    rec = {}
    if op == "get":
        rc = s.get_into(keys[0], addr_of(rbuf), SLOT)
        rec["rc"] = [rc]
        rec["got"] = [check_read(keys[0], memoryview(rbuf)[:rc], bad) if rc > 0 else None]
    elif op == "batch_get":
        base = addr_of(rbuf)
        rcs = s.batch_get_into(keys, [base + i * SLOT for i in range(len(keys))], [SLOT] * len(keys))
        rec["rc"] = list(rcs)
        rec["got"] = [check_read(k, memoryview(rbuf)[i * SLOT:i * SLOT + rc], bad) if rc > 0 else None
                      for i, (k, rc) in enumerate(zip(keys, rcs))]
    elif op == "get_batch":
        vals = s.get_batch(keys)
        rec["rc"] = [len(v) if v else -1 for v in vals]  # b"": missing or failed (the API does not say)
        rec["got"] = [check_read(k, v, bad) if v else None for k, v in zip(keys, vals)]
    elif op == "exists":
        rec["rc"] = [s.is_exist(keys[0])]
    elif op in ("upsert", "put", "upsert_parts"):
        v = values.make_value(keys[0], o["versions"][0], o["sizes"][0])
        if op == "upsert":
            rc = s.upsert(keys[0], v)
        elif op == "put":
            rc = s.put(keys[0], v)
        else:
            a, b = len(v) // 3, 2 * len(v) // 3
            mv = memoryview(v)
            rc = s.upsert_parts(keys[0], mv[:a], mv[a:b], mv[b:])
        rec["rc"] = [rc]
    elif op in ("batch_upsert", "batch_put"):
        base = addr_of(wbuf)
        ptrs = []
        for i, (k, ver, n) in enumerate(zip(keys, o["versions"], o["sizes"])):
            wbuf[i * SLOT:i * SLOT + n] = values.make_value(k, ver, n)
            ptrs.append(base + i * SLOT)
        f = s.batch_upsert_from if op == "batch_upsert" else s.batch_put_from
        rec["rc"] = list(f(keys, ptrs, o["sizes"]))
    elif op == "remove":
        rec["rc"] = [s.remove(keys[0])]
    elif op == "batch_remove":
        rec["rc"] = list(s.batch_remove(keys))
    if bad:
        rec["bad"] = bad
    return rec


HANG_AFTER = 60.0  # s: an operation still running this long is reported as hung


class HangWatch:
    """A daemon thread that reports an operation still running after
    HANG_AFTER seconds: a {"op": "hung"} record in the log (the analyzer's
    "hung" violation) and, once per process, every thread's native stack
    (gdb, when installed) in <log>.hung.txt, to diagnose the hang. The
    operation itself cannot be interrupted (its buffers are in use)."""

    def __init__(self, log, path):
        self.log, self.path = log, path
        self.lock = threading.Lock()
        self.cur = None  # (i, op, keys, t0) of the running operation
        self.reported = set()
        threading.Thread(target=self.loop, daemon=True).start()

    def begin(self, i, o, t0):
        with self.lock:
            self.cur = (i, o["op"], o["keys"], t0)

    def end(self):
        with self.lock:
            self.cur = None

    def loop(self):
        while True:
            time.sleep(1.0)
            with self.lock:
                cur = self.cur
            if cur is None or cur[0] in self.reported or time.monotonic() - cur[3] < HANG_AFTER:
                continue
            self.reported.add(cur[0])
            self.log.write({"op": "hung", "i": cur[0], "what": cur[1], "k": cur[2], "t0": cur[3],
                            "t1": time.monotonic(), "rc": []})
            self.log.flush()
            print(f"HUNG op {cur[0]} {cur[1]} {cur[2]} running for {time.monotonic() - cur[3]:.0f} s",
                  file=sys.stderr, flush=True)
            if len(self.reported) == 1:
                with open(self.path + ".hung.txt", "w") as f:
                    f.write(f"hung: op {cur[0]} {cur[1]} {cur[2]}\n== Python stacks\n")
                    f.flush()
                    faulthandler.dump_traceback(f, all_threads=True)
                    f.write("== native stacks (gdb)\n")
                    f.flush()
                    if shutil.which("gdb"):
                        subprocess.run(["gdb", "-p", str(os.getpid()), "-batch", "-ex", "thread apply all bt"],
                                       stdout=f, stderr=subprocess.STDOUT, timeout=120, check=False)


def workload(args):
    log = Log(args.log)
    s = connect(args, log)
    watch = HangWatch(log, args.log)
    rbuf = bytearray(SLOT * MAX_BATCH)
    wbuf = bytearray(SLOT * 4)
    fails = 0
    end = time.monotonic() + args.seconds
    for i, o in enumerate(plan(args.seed, args.id, args.workers, args.keys, args.focus)):
        if STOP or time.monotonic() >= end or s is None:
            break
        time.sleep(o["think"])
        t0 = time.monotonic()
        watch.begin(i, o, t0)
        rec = run_op(s, o, rbuf, wbuf)
        t1 = time.monotonic()
        watch.end()
        rec.update({"i": i, "op": o["op"], "k": o["keys"], "t0": t0, "t1": t1})
        if "versions" in o:
            rec["v"] = o["versions"]
            rec["n"] = o["sizes"]
        log.write(rec)
        # An attached worker whose node died reconnects once calls keep failing.
        failed = all(isinstance(r, int) and r < 0 and r not in (NOT_FOUND, -1) for r in rec["rc"])
        fails = fails + 1 if failed else 0
        if args.attach and fails >= 3:
            s.close()
            s = connect(args, log)
            fails = 0
    if s is not None:
        s.close()
    log.close()


def fill(args):
    """Upserts 4 MiB (+ odd) fill values into the attached node until `bytes` were
    written, holds, then removes them."""
    log = Log(args.log)
    s = connect(args, log)
    if s is None:
        return
    t0 = time.monotonic()
    written, n, codes = 0, 0, {}
    keys = []
    while written < args.bytes and not STOP and time.monotonic() - t0 < args.seconds:
        k = f"fill/{args.id}/{n}"
        v = values.make_value(k, 1, (4 << 20) + 4093)
        rc = s.upsert(k, v)
        codes[rc] = codes.get(rc, 0) + 1
        keys.append(k)
        written += len(v) if rc == 0 else 0
        n += 1
    t1 = time.monotonic()
    end = time.monotonic() + args.hold
    while time.monotonic() < end and not STOP:
        time.sleep(0.1)
    rm = {}
    for i in range(0, len(keys), 64):
        for rc in s.batch_remove(keys[i:i + 64]):
            rm[rc] = rm.get(rc, 0) + 1
    log.write({"op": "fill", "t0": t0, "t1": t1, "t2": time.monotonic(), "written": written, "puts": codes,
               "removes": rm})
    s.close()
    log.close()


def overload(args):
    """Seeds keys on the node (attached), then THREADS threads of a pure client in
    this namespace read them (remote reads served by the node) and write keys
    for `seconds`. Every outcome must be a result, OVERLOADED or TIMEOUT."""
    log = Log(args.log)
    a = connect(argparse.Namespace(**{**vars(args), "attach": args.attach}), log)
    if a is None:
        return
    nk = 32
    keys = [f"ov/{args.id}/k{i}" for i in range(nk)]
    sizes = [(i * 37_171) % (1 << 19) + 1 for i in range(nk)]
    for k, n in zip(keys, sizes):
        a.upsert(k, values.make_value(k, 1, n))
    a.close()
    s = connect(argparse.Namespace(**{**vars(args), "attach": None}), log)
    if s is None:
        return
    end = time.monotonic() + args.seconds
    lock = threading.Lock()
    stats = {"codes": {}, "ops": 0, "max_s": 0.0, "bad": []}

    def requester(t):
        rng = random.Random(f"ov-{args.seed}-{args.id}-{t}")
        slot = (1 << 19) + 64  # the seeded values are at most 512 KiB
        buf = bytearray(slot * 8)
        base = addr_of(buf)
        while time.monotonic() < end and not STOP:
            bad = []
            t0 = time.monotonic()
            r = rng.random()
            if r < 0.6:
                ks = rng.sample(keys, 8)
                rcs = s.batch_get_into(ks, [base + i * slot for i in range(8)], [slot] * 8)
                for i, (k, rc) in enumerate(zip(ks, rcs)):
                    if rc > 0:
                        got = check_read(k, memoryview(buf)[i * slot:i * slot + rc], bad)
                        if isinstance(got, int) and got != 1:
                            bad.append(f"{k}: version {got}, only 1 was written")
            elif r < 0.9:
                k = rng.choice(keys)
                rc = s.get_into(k, base, slot)
                rcs = [rc]
                if rc > 0:
                    check_read(k, memoryview(buf)[:rc], bad)
            else:
                k = f"ov/{args.id}/t{t}"
                rcs = [s.upsert(k, values.make_value(k, 1, 300_000 + t))]
            dt = time.monotonic() - t0
            with lock:
                stats["ops"] += 1
                stats["max_s"] = max(stats["max_s"], dt)
                for rc in rcs:
                    c = "ok" if rc >= 0 else str(rc)
                    stats["codes"][c] = stats["codes"].get(c, 0) + 1
                stats["bad"] += bad

    threads = [threading.Thread(target=requester, args=(t,)) for t in range(args.threads)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    log.write({"op": "overload", "t0": t0, "t1": time.monotonic(), "threads": args.threads, **stats})
    s.close()
    log.close()


def verify(args):
    """Reads every key of the workers until found or `seconds` passed."""
    log = Log(args.log)
    s = connect(args, log)
    if s is None:
        return
    buf = bytearray(SLOT)
    base = addr_of(buf)
    pending = [key_of(w, i) for w in range(args.workers) for i in range(args.keys)]
    start = time.monotonic()
    while pending and not STOP:
        left = []
        for k in pending:
            bad = []
            t0 = time.monotonic()
            rc = s.get_into(k, base, SLOT)
            t1 = time.monotonic()
            if rc > 0:
                got = check_read(k, memoryview(buf)[:rc], bad)
                rec = {"op": "verify", "k": [k], "rc": [rc], "got": [got], "t0": t0, "t1": t1, "since": start}
                if bad:
                    rec["bad"] = bad
                log.write(rec)
            else:
                left.append((k, rc))
        if time.monotonic() - start > args.seconds:
            for k, rc in left:
                log.write({"op": "verify", "k": [k], "rc": [rc], "got": [None], "t0": start,
                           "t1": time.monotonic(), "since": start})
            break
        pending = [k for k, _ in left]
        if pending:
            time.sleep(0.5)
    s.close()
    log.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["workload", "fill", "overload", "verify"])
    p.add_argument("--id", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--keys", type=int, default=48)
    p.add_argument("--focus", help="workload: an operation made ten times as likely")
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--log", required=True)
    p.add_argument("--attach", help="node client RPC address to attach to (setup_dummy)")
    p.add_argument("--master", help="master address (pure client): host:port, or etcd://host:port (HA)")
    p.add_argument("--cluster_id", help="with an etcd:// master address: the cluster id")
    p.add_argument("--ip", help="this namespace's address (pure client)")
    p.add_argument("--rpc_timeout", type=int, default=3000)
    p.add_argument("--bytes", type=int, default=0)
    p.add_argument("--hold", type=float, default=3)
    p.add_argument("--threads", type=int, default=64)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    {"workload": workload, "fill": fill, "overload": overload, "verify": verify}[args.mode](args)


if __name__ == "__main__":
    main()
