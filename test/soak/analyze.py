"""The soak's invariant checks over the workers' operation logs, and its
report (scripts/soak.py calls Report(...).write()). The rules are written
out in test/soak/README.md ("Invariants"); the names in that file are the
`kind` strings below.
"""
import bisect
import csv
import glob
import hashlib
import json
import os
import shutil
import statistics
import subprocess

import values
import worker

CODES = {0: "ok", -704: "OBJECT_NOT_FOUND", -600: "INVALID_PARAMS", -800: "TRANSFER_FAIL", -900: "RPC_FAIL",
         -200: "NO_AVAILABLE_HANDLE", -1001: "CLIENT_NOT_FOUND", -1010: "UNAVAILABLE_IN_CURRENT_STATUS",
         -1011: "UNAVAILABLE_IN_CURRENT_MODE", -1100: "TIMEOUT", -1101: "CANCELLED", -1102: "SHUTTING_DOWN",
         -1103: "UNSUPPORTED", -1104: "ACCESS_DENIED", -1105: "OUT_OF_RANGE", -1106: "TOO_LARGE", -1107: "OVERLOADED",
         -1108: "REPLICATION_INCOMPLETE", -1109: "SUPERSEDED",
         -10: "BUFFER_OVERFLOW", -1: "empty (missing or failed)"}
# A failed operation is an outcome, not a violation (a client may fail while a
# node or the leader is down: RPC_FAIL, TIMEOUT, UNAVAILABLE_IN_CURRENT_STATUS
# during a failover, ...). What is checked is what succeeded: the bytes a read
# returned (integrity, phantom, stale), the time taken (deadline), and after
# the chaos that every key is readable again (liveness). The one failure code
# that is a violation is BUFFER_OVERFLOW / TOO_LARGE on a get (overflow).
VIOLATING_GET_CODES = (-10, -1106)
STALE_WINDOW = 3.0       # s: a cached route / an undelivered drop notice (README "Consistency model")
OP_BOUND_SLACK = 5.0     # s added to an operation's deadline
WRITES = ("upsert", "put", "upsert_parts", "batch_upsert", "batch_put", "remove", "batch_remove")


def plan_digest(seed, nworkers, nkeys, count, focus=None):
    """sha256 of the first `count` planned operations of every worker: the same
    seed gives the same workload sequence."""
    h = hashlib.sha256()
    for w in range(nworkers):
        g = worker.plan(seed, w, nworkers, nkeys, focus)
        for _ in range(count):
            h.update(json.dumps(next(g), sort_keys=True).encode())
    return h.hexdigest()


def code_name(rc):
    if isinstance(rc, int) and rc > 0:
        return "ok"
    return CODES.get(rc, str(rc))


def read_jsonl(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by a kill
    return out


# The nodes' shutdown watchdog (mc::apps::shutdown_limit): a stop that hangs
# exits 1 after about this long.
WATCHDOG_S = 6.0

class Write:
    __slots__ = ("t0", "t1", "version", "op", "ok", "size", "bound", "holder")

    def __init__(self, t0, t1, version, op, ok, size, holder):
        self.t0, self.t1, self.version, self.op, self.ok, self.size, self.holder = t0, t1, version, op, ok, size, holder
        self.bound = None  # the version readers may not go below once this completed (None: unchanged)


class Analyzer:
    def __init__(self, out_dir, faults, attached, op_bound, upto=None):
        self.out = out_dir
        self.upto = upto              # live check: only reads that returned before this time
        self.faults = faults          # [{kind, node, start, end}]
        self.attached = attached      # worker id -> node it is attached to (None: pure client)
        self.op_bound = op_bound      # s: deadline of one operation (without slack)
        self.writes = {}              # key -> [Write] in issue order
        self.reads = []               # (worker, rec)
        self.violations = []
        self.stale = {}               # excuse -> count
        self.max_stale_lag = 0.0
        self.outcomes = {}            # op -> {code -> count}
        self.fails = []               # (t0, code) of every failed key-operation (OBJECT_NOT_FOUND is no failure)
        self.ok_writes = []           # (t0, t1) of every successful upsert (a value stored through the master)
        self.lat = {}                 # op -> [seconds]
        self.max_lat = {}
        self.load()

    def viol(self, kind, detail):
        self.violations.append({"kind": kind, "detail": detail})

    def load(self):
        for path in sorted(glob.glob(os.path.join(self.out, "ops-w*.jsonl"))):
            w = int(os.path.basename(path)[5:-6])
            for r in read_jsonl(path):
                op = r.get("op")
                if op == "connect":
                    continue
                if op == "hung":  # the worker's watchdog: still running after worker.HANG_AFTER s
                    self.viol("hung", f"w{w} op {r['i']} {r['what']} {r['k'][:3]} started at {r['t0']:.3f} still "
                                      f"running after {r['t1'] - r['t0']:.0f} s (stacks: ops-w{w}.jsonl.hung.txt)")
                    continue
                o = self.outcomes.setdefault(op, {})
                for rc in r["rc"]:
                    o[code_name(rc)] = o.get(code_name(rc), 0) + 1
                dt = r["t1"] - r["t0"]
                self.lat.setdefault(op, []).append(dt)
                if dt > self.op_bound + OP_BOUND_SLACK:
                    self.viol("deadline", f"w{w} op {r['i']} {op} {r['k'][:3]} took {dt:.2f} s "
                                          f"(bound {self.op_bound:.0f} s + {OP_BOUND_SLACK:.0f} s), rc {r['rc']}")
                for b in r.get("bad", []):
                    self.viol("integrity", f"w{w} op {r['i']} {op}: {b}")
                # Read buffers hold the largest value ever written: no overflow may be reported.
                for k, rc in zip(r["k"], r["rc"]):
                    if op in ("get", "batch_get") and rc in VIOLATING_GET_CODES:
                        self.viol("overflow", f"w{w} op {r['i']} {op} {k}: {code_name(rc)} into a "
                                              f"{worker.SLOT}-byte buffer (no value is larger)")
                for rc in r["rc"]:
                    if isinstance(rc, int) and rc < 0 and rc not in (-704, -1):
                        self.fails.append((r["t0"], rc))
                # Upserts only: a put of a key that exists can succeed without the master.
                if op in ("upsert", "upsert_parts", "batch_upsert") and all(rc == 0 for rc in r["rc"]):
                    self.ok_writes.append((r["t0"], r["t1"]))
                if op in WRITES:
                    for k, v, n, rc in zip(r["k"], r["v"], r["n"], r["rc"]):
                        ok = rc == 0 or ("remove" in op and rc == -704)
                        self.writes.setdefault(k, []).append(Write(r["t0"], r["t1"], v, op, ok, n,
                                                                   self.attached.get(w)))
                elif "got" in r and (self.upto is None or r["t1"] < self.upto):
                    self.reads.append((w, r))
        path = os.path.join(self.out, "verify.jsonl")
        if self.upto is not None:
            path = "/nonexistent"
        self.verify = [r for r in read_jsonl(path) if r.get("op") == "verify"] if os.path.exists(path) else []
        for r in self.verify:
            for b in r.get("bad", []):
                self.viol("integrity", f"verify: {b}")
        # Bounds along each key's write sequence (one writer per key: sequential).
        for k, ws in self.writes.items():
            ws.sort(key=lambda x: x.version)
            absent = True  # the writer knows the key is absent (never written or removed)
            for x in ws:
                if not x.ok:
                    absent = None
                    continue
                if "remove" in x.op:
                    x.bound, absent = x.version, True
                elif x.op in ("put", "batch_put"):
                    if absent is True:
                        x.bound = x.version
                    absent = False
                else:
                    x.bound, absent = x.version, False
        self.t1s = {k: [x.t1 for x in ws] for k, ws in self.writes.items()}

    def faults_in(self, a, b, kinds=None, node=None):
        return [f for f in self.faults if f["start"] <= b and f.get("end", 1e18) >= a - STALE_WINDOW
                and (kinds is None or f["kind"] in kinds) and (node is None or f["node"] in (node, 0))]

    def version_of(self, key, got, t1, where):
        """The version a read returned (tiny values matched against the writes), or None."""
        if isinstance(got, int):
            return got
        data = bytes.fromhex(got[5:])
        cands = [x.version for x in self.writes.get(key, []) if x.size == len(data) and x.t0 <= t1
                 and "remove" not in x.op]
        m = values.match_tiny(key, data, cands)
        if not m:
            self.viol("integrity", f"{where} {key}: {len(data)}-byte value matches no write of the key")
            return None
        return max(m)

    def check_read(self, key, got, t0, t1, where):
        """Existence and freshness of one successful read (see the README)."""
        v = self.version_of(key, got, t1, where)
        if v is None:
            return
        ws = self.writes.get(key, [])
        started = [x for x in ws if x.t0 <= t1 and "remove" not in x.op]
        if not any(x.version == v for x in started):
            self.viol("phantom", f"{where} {key}: version {v} read in [{t0:.3f}, {t1:.3f}] was never started "
                                 f"before the read ended")
            return
        # The newest bound-setting write that completed before the read started.
        bound = None
        for x in ws:
            if x.bound is not None and x.t1 < t0 and (bound is None or x.version > bound.version):
                bound = x
        if bound is None or v >= bound.bound:
            return
        lag = t0 - bound.t1
        self.max_stale_lag = max(self.max_stale_lag, lag) if lag <= STALE_WINDOW else self.max_stale_lag
        # The old holder is told to drop its copy in its next heartbeat reply:
        # by bound.t1 + STALE_WINDOW, later only if a fault delayed it.
        notice_by = bound.t1 + STALE_WINDOW
        for f in self.faults_in(bound.t0, notice_by, kinds=("stop", "partition", "loss", "rate")):
            notice_by = max(notice_by, min(f.get("end", 1e18), t0) + STALE_WINDOW)
        restarts = self.faults_in(bound.t0, t1, kinds=("master",))
        if lag <= STALE_WINDOW:
            excuse = "within the stale window"
        elif any(f["start"] <= notice_by for f in restarts):
            excuse = "master restart before the old copy's drop notice (re-publish race)"
        elif restarts:
            self.viol("resurrected", f"{where} {key}: read version {v} at {t0:.3f}; {bound.op} of version "
                                     f"{bound.version} completed at {bound.t1:.3f}, its old copy should have been "
                                     f"dropped by {notice_by:.3f}, yet a master restart at "
                                     f"{restarts[0]['start']:.3f} brought it back")
            return
        elif self.faults_in(bound.t0, t0, kinds=("stop", "partition", "loss", "rate", "kill")):
            excuse = "drop notice possibly lost (fault overlapped)"
        else:
            self.viol("stale", f"{where} {key}: read version {v} at {t0:.3f}, but {bound.op} of version "
                               f"{bound.version} completed at {bound.t1:.3f} ({lag:.2f} s before) with no fault since")
            return
        self.stale[excuse] = self.stale.get(excuse, 0) + 1

    def check(self):
        for w, r in self.reads:
            for k, rc, got in zip(r["k"], r["rc"], r["got"]):
                if got is not None:
                    self.check_read(k, got, r["t0"], r["t1"], f"w{w} op {r['i']} {r['op']}")
        if self.upto is None:
            self.check_final()

    def check_final(self):
        """After the chaos: each key must be readable (or absent when its last
        write removed it) unless a fault could have lost it."""
        self.final = {"read": 0, "absent_ok": 0, "lost_excused": 0, "lost": 0, "recovery_s": []}
        if not self.verify:
            self.viol("liveness", "no verification reads (verify did not run)")
            return
        seen = {}
        for r in self.verify:
            seen[r["k"][0]] = r
        for key, r in seen.items():
            ws = self.writes.get(key, [])
            got = r["got"][0]
            if got is not None:
                self.check_read(key, got, r["t0"], r["t1"], "verify")
                self.final["read"] += 1
                self.final["recovery_s"].append(r["t1"] - r["since"])
                continue
            bounds = [x for x in ws if x.bound is not None]
            last = bounds[-1] if bounds else None
            later_failed = [x for x in ws if not x.ok and (last is None or x.version > last.version)]
            if last is None or "remove" in last.op:
                self.final["absent_ok"] += 1
                continue
            if later_failed:
                self.final["absent_ok"] += 1  # the outcome of the last write is unknown
                continue
            node = last.holder  # None: a pure client's put, routed to any node
            lost = self.faults_in(last.t0, r["t1"], kinds=("kill", "fill"), node=node)
            if lost:
                self.final["lost_excused"] += 1
                continue
            self.final["lost"] += 1
            self.viol("liveness", f"{key}: {last.op} of version {last.version} completed at {last.t1:.3f} "
                                  f"(holder {'node%d' % node if node else 'routed'}), no kill or fill since, "
                                  f"yet not readable after the recovery time (last rc {r['rc'][0]})")


def failover(f, mhealth, ok_writes, fails, until):
    """Figures of one leader fault `f` (HA; f: start, end, action, victim_name,
    term: the leader's term when it was hit) from the masters' /health samples
    `mhealth` ({name: [(t, role or None, term)]}, in time order), the workload's
    successful writes `ok_writes` [(t0, t1)] and failed key-operations `fails`
    [(t0, code)], up to `until` (the next leader fault or the end):
      elected   first sample of a term above f's naming itself leader or
                rebuilding, seconds after the fault;
      rebuilt   first sample of such a term saying leader (table rebuilt);
      resumed   no new term: the hit leader answering leader again (it kept
                its lease: a SIGSTOP shorter than the lease);
      first_write  first successful upsert (upsert, upsert_parts,
                batch_upsert: each needs the leader) started after the fault:
                its return, seconds after the fault;
      failed    {code: n} of the key-operations started from the fault until
                rebuilt (or resumed; else `until`) that failed."""
    t_f = f["start"]
    old = f.get("term") or 0
    row = {"t": t_f, "action": f.get("action"), "leader": f.get("victim_name"), "term": f.get("term"),
           "length": f.get("end", t_f) - t_f, "elected": None, "rebuilt": None, "resumed": None,
           "new_leader": None, "new_term": None, "first_write": None, "failed": {}}
    for name, samples in mhealth.items():
        for t, role, term in samples:
            if t < t_f or t > until or term is None:
                continue
            if term > old and role in ("leader", "rebuilding") and (row["elected"] is None or t - t_f < row["elected"]):
                row["elected"], row["new_leader"], row["new_term"] = t - t_f, name, term
            if term > old and role == "leader" and (row["rebuilt"] is None or t - t_f < row["rebuilt"]):
                row["rebuilt"] = t - t_f
            # (after the SIGCONT: a reply received just after the SIGSTOP left before it)
            if (name == f.get("victim_name") and term == old and role == "leader" and t >= f.get("end", t_f)
                    and (row["resumed"] is None or t - t_f < row["resumed"])):
                row["resumed"] = t - t_f
    if row["elected"] is not None:
        row["resumed"] = None  # a new term: the old leader did not come back as leader
    for t0, t1 in ok_writes:
        if t_f <= t0 <= until and (row["first_write"] is None or t1 - t_f < row["first_write"]):
            row["first_write"] = t1 - t_f
    back = row["rebuilt"] if row["rebuilt"] is not None else row["resumed"]
    end = t_f + back if back is not None else until
    for t0, code in fails:
        if t_f <= t0 <= end:
            n = code_name(code)
            row["failed"][n] = row["failed"].get(n, 0) + 1
    return row


def failover_rows(faults, mhealth, ok_writes, fails, t_end):
    """failover() of every leader fault (kind master with a victim), each up to
    the next one's start or t_end."""
    hits = sorted((f for f in faults if f["kind"] == "master" and f.get("victim_name")), key=lambda f: f["start"])
    rows = []
    for j, f in enumerate(hits):
        until = hits[j + 1]["start"] if j + 1 < len(hits) else t_end
        rows.append(failover(f, mhealth, ok_writes, fails, until))
    return rows


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


class Report:
    def __init__(self, args, soak, err):
        self.a, self.s, self.err = args, soak, err

    def write(self):
        a, s = self.a, self.s
        out = a.out
        faults = []
        w0 = getattr(s, "w0", 0.0)
        for rec in s.events_log:
            f = {k: v for k, v in rec.items() if k != "proc"}
            f.setdefault("end", 1e18)
            faults.append(f)
        attached = {p.wid: (p.node if p.attached else None) for p in getattr(s, "workers", [])}
        op_bound = 3 * a.rpc_timeout_ms / 1000.0
        op_bound = max(op_bound, 10.0)  # attached calls: the attach client's own 10 s deadline
        an = Analyzer(out, faults, attached, op_bound)
        an.check()
        for d in s.deaths:
            an.viol("process", f"{d['name']} exited with status {d['rc']} at {d['t']:.1f} s: "
                               f"{d['tail'][-600:]!r}")
        if self.err:
            an.viol("harness", self.err)
        for name, rc, secs in getattr(s, "stops", []):
            # Exit status 1 within the watchdog's limit (~6 s) is the known
            # shutdown backstop (README "What does not work yet": transfer
            # operations stuck since earlier faults are abandoned): reported
            # under "Final stop", not a violation. Anything else is.
            if rc == 1 and secs <= WATCHDOG_S + 2:
                continue
            if rc != 0:
                an.viol("shutdown", f"{name}: SIGTERM -> exit status {rc} after {secs:.1f} s "
                                    f"(README: a node stops within max(2 s, rpc_timeout); the watchdog exits 1)")
        # Overload phase.
        over = []
        for path in sorted(glob.glob(os.path.join(out, "overload-*.jsonl"))):
            for r in read_jsonl(path):
                if r.get("op") == "overload":
                    over.append((path, r))
                    for c in r["codes"]:
                        if c not in ("ok", "-1107", "-1100", "-704"):
                            an.viol("overload", f"{os.path.basename(path)}: {r['codes'][c]} answers {c} "
                                                f"({code_name(int(c))}): not a result, OVERLOADED or TIMEOUT")
                    if r["max_s"] > op_bound + OP_BOUND_SLACK:
                        an.viol("overload", f"{os.path.basename(path)}: an operation took {r['max_s']:.1f} s")
                    for b in r["bad"]:
                        an.viol("integrity", f"overload: {b}")
        if a.overload_threads and len(over) < a.nodes and not self.err:
            an.viol("overload", f"{len(over)} of {a.nodes} overload workers reported")
        # Recovery after each fault.
        rec_rows = []
        for f in faults:
            if f["end"] >= 1e17:
                continue
            target = 0 if f["kind"] == "master" else f["node"]
            if f["kind"] == "master" and f.get("action") in ("kill", "stop") and not f.get("victim_name"):
                rec_rows.append((f, 0.0, "no leader was known: nothing done"))
                continue
            if f["kind"] == "fill":
                rec_rows.append((f, f["end"] - f["start"], "fill written and removed"))
                continue
            h = s.healthy(target, f["end"])
            rec_rows.append((f, (h - f["end"]) if h else None, "registered and serving" if target else
                             "master up, every node healthy"))
        for f, r, _ in rec_rows:
            if r is None and f["kind"] != "fill":
                an.viol("recovery", f"{f['kind']} node{f['node']} at {f['start'] - w0:.1f} s: never healthy again")
        # RSS.
        with open(os.path.join(out, "rss.csv"), "w", newline="") as fcsv:
            wr = csv.writer(fcsv)
            wr.writerow(["t_s", "process", "pid", "rss_kib"])
            wr.writerows(s.rss_rows)
        rss = {}
        for t, name, pid, kib in s.rss_rows:
            rss.setdefault(name, []).append((t, kib))
        node_cap_kib = (a.dram_mib + 512) * 1024  # DRAM tier + staging, caches, runtime: bound for a node
        for name, xs in rss.items():
            if name.startswith("node") and max(k for _, k in xs) > node_cap_kib:
                an.viol("rss", f"{name} peaked at {max(k for _, k in xs) / 1024:.0f} MiB "
                               f"(> {node_cap_kib / 1024:.0f} MiB)")
        plot = self.plot(rss)
        ok = not an.violations
        L = []
        L.append(f"# Chaos soak report\n")
        L.append(f"- result: **{'PASS' if ok else 'FAIL'}** ({len(an.violations)} invariant violations)")
        L.append(f"- seed {a.seed}, {a.minutes:g} min, {a.nodes} nodes (DRAM {a.dram_mib} MiB + SSD {a.ssd_mib} MiB),"
                 f" {a.nodes * a.workers_per_node} workload processes, {a.keys} keys each, rpc_timeout "
                 f"{a.rpc_timeout_ms} ms, overload {a.overload_threads} requesters per node")
        L.append(f"- masters: {getattr(a, 'ha_note', 'one')}")
        L.append(f"- replay: `make soak MINUTES={a.minutes:g} SEED={a.seed}` (schedule.json: the schedule and the "
                 f"workload's sha256)")
        if self.err:
            L.append(f"- harness error: `{self.err}`")
        L.append(f"- cluster healthy {getattr(s, 'heal_time', float('nan')):.2f} s after the workload stopped\n")
        L.append("## Operations by outcome\n")
        codes = sorted({c for o in an.outcomes.values() for c in o})
        L.append("| op | " + " | ".join(codes) + " | total |")
        L.append("|---|" + "---|" * (len(codes) + 1))
        tot = 0
        for op in sorted(an.outcomes):
            o = an.outcomes[op]
            tot += sum(o.values())
            L.append(f"| {op} | " + " | ".join(str(o.get(c, 0)) for c in codes) + f" | {sum(o.values())} |")
        L.append(f"\n{tot} key-operations in all (a batch counts once per key).\n")
        L.append("## Latency (seconds, every outcome)\n")
        L.append("| op | count | p50 | p90 | p99 | max |")
        L.append("|---|---|---|---|---|---|")
        for op in sorted(an.lat):
            xs = an.lat[op]
            L.append(f"| {op} | {len(xs)} | {pct(xs, 50):.4f} | {pct(xs, 90):.4f} | {pct(xs, 99):.4f} | "
                     f"{max(xs):.3f} |")
        L.append(f"\nDeadline checked: every operation within {op_bound:.0f} s + {OP_BOUND_SLACK:.0f} s.\n")
        L.append("## Invariant violations\n")
        if not an.violations:
            L.append("None.\n")
        else:
            kinds = {}
            for v in an.violations:
                kinds[v["kind"]] = kinds.get(v["kind"], 0) + 1
            L.append(", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())) + "\n")
            for v in an.violations[:200]:
                L.append(f"- **{v['kind']}**: {v['detail']}")
            if len(an.violations) > 200:
                L.append(f"- ... {len(an.violations) - 200} more (violations.json)")
            L.append("")
        with open(os.path.join(out, "faults.json"), "w") as ff:
            json.dump({"w0": w0, "faults": faults}, ff, indent=1)
        with open(os.path.join(out, "violations.json"), "w") as fv:
            json.dump(an.violations, fv, indent=1)
        L.append("## Allowed stale reads (documented behaviour)\n")
        if an.stale:
            for k, n in sorted(an.stale.items()):
                L.append(f"- {k}: {n}")
        else:
            L.append("- none")
        L.append(f"\nLongest stale lag inside the window: {an.max_stale_lag:.3f} s (window {STALE_WINDOW} s).\n")
        fin = getattr(an, "final", {})
        if fin:
            rs = fin["recovery_s"]
            L.append("## After the chaos (verification)\n")
            L.append(f"- keys read: {fin['read']} (time from the start of verification to the read: p50 "
                     f"{pct(rs, 50):.2f} s, max {max(rs) if rs else float('nan'):.2f} s; bound "
                     f"{a.recover_seconds:g} s)")
            L.append(f"- absent as expected (last write a remove, or its outcome unknown): {fin['absent_ok']}")
            L.append(f"- missing, excused (a kill or a fill of a possible holder since the last write): "
                     f"{fin['lost_excused']}")
            L.append(f"- missing without excuse (violations): {fin['lost']}\n")
        L.append("## Faults and recovery\n")
        L.append("Recovery: from the end of the fault (restart, SIGCONT, link up, rules removed) until the node "
                 "answers /health 200 and the master lists it healthy (master: every node healthy).\n")
        L.append("| t (s) | fault | target | length (s) | recovery (s) | until |")
        L.append("|---|---|---|---|---|---|")
        for f, r, what in rec_rows:
            extra = f" {f['pct']}%" if "pct" in f else (f" {f['mbit']} Mbit/s" if "mbit" in f else "")
            extra += f" {f['action']}" if "action" in f else ""
            tgt = "node%d" % f["node"] if f["node"] else (f.get("victim_name") or "master")
            L.append(f"| {f['start'] - w0:.1f} | {f['kind']}{extra} | {tgt}"
                     f" | {f['end'] - f['start']:.1f} | {'never' if r is None else '%.2f' % r} | {what} |")
        rr = [r for f, r, _ in rec_rows if r is not None and f["kind"] != "fill"]
        if rr:
            L.append(f"\nRecovery p50 {pct(rr, 50):.2f} s, max {max(rr):.2f} s over {len(rr)} faults.\n")
        L += self.failover_section(faults, an, w0)
        if over:
            L.append("## Overload phase\n")
            L.append("| worker | threads | operations | outcomes (per key) | longest (s) |")
            L.append("|---|---|---|---|---|")
            for path, r in over:
                oc = ", ".join(f"{code_name(int(c)) if c != 'ok' else 'ok'}: {n}" for c, n in sorted(r["codes"].items()))
                L.append(f"| {os.path.basename(path)} | {r['threads']} | {r['ops']} | {oc} | {r['max_s']:.2f} |")
            L.append("")
        if getattr(s, "stops", None):
            L.append("## Final stop (SIGTERM)\n")
            L.append(", ".join(f"{n}: status {rc} in {t:.1f} s" for n, rc, t in s.stops) + "\n")
            backstop = [n for n, rc, t in s.stops if rc == 1 and t <= WATCHDOG_S + 2]
            if backstop:
                L.append(f"Stopped by the shutdown watchdog (exit 1, the known backstop gap, not counted as a "
                         f"violation): {', '.join(backstop)}.\n")
        L.append("## Resident memory (rss.csv" + (", rss.png" if plot else "") + ")\n")
        L.append("| process | samples | first MiB | max MiB | last MiB |")
        L.append("|---|---|---|---|---|")
        for name in sorted(rss, key=lambda n: (not n.startswith(("master", "node")), n)):
            xs = rss[name]
            L.append(f"| {name} | {len(xs)} | {xs[0][1] / 1024:.0f} | {max(k for _, k in xs) / 1024:.0f} | "
                     f"{xs[-1][1] / 1024:.0f} |")
        L.append(f"\nBound checked for nodes: {node_cap_kib / 1024:.0f} MiB (DRAM tier + 512 MiB).\n")
        if plot:
            L.append("![RSS over time](rss.png)\n")
        with open(os.path.join(out, "report.md"), "w") as f:
            f.write("\n".join(L) + "\n")
        print("\n".join(L[:3]))
        for v in an.violations[:20]:
            print(f"VIOLATION {v['kind']}: {v['detail']}")
        return ok

    def failover_section(self, faults, an, w0):
        """The leader faults (HA): figures per fault and their median / max."""
        a, s = self.a, self.s
        L = ["## Leader failover (HA)\n"]
        if not getattr(s, "ha", False):
            L.append(f"Not measured (masters: {getattr(a, 'ha_note', 'one, no HA')}): the master fault is a "
                     f"kill -9 and restart of the only master.\n")
            return L
        rows = failover_rows(faults, getattr(s, "mhealth", {}), an.ok_writes, an.fails, 1e18)
        with open(os.path.join(a.out, "masters-health.json"), "w") as fm:
            json.dump({"w0": w0, "samples": getattr(s, "mhealth", {})}, fm)  # [t, role, term] per master
        L.append("From the fault (kill -9 or SIGSTOP of the master whose /health said leader): **elected**, the "
                 "first /health sample (every 100 ms) of a new term saying leader or rebuilding; **rebuilt**, saying "
                 "leader; **first write**, the return of the first successful upsert started after the fault (a put of "
                 "an existing key may succeed without the master); "
                 "failed key-operations started from the fault until rebuilt or resumed (outcomes, not violations). A "
                 "SIGSTOP shorter than the lease can leave the leader in place (no election: **resumed**, the "
                 "same leader and term answering again).\n")
        L.append("| t (s) | action | leader (term) | length (s) | new leader (term) | elected (s) | rebuilt (s) | "
                 "resumed (s) | first write (s) | failed key-ops until rebuilt (or resumed) |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")

        def fmt(x):
            return "-" if x is None else f"{x:.2f}"
        for r in rows:
            failed = ", ".join(f"{c}: {n}" for c, n in sorted(r["failed"].items())) or "none"
            new = f"{r['new_leader']} ({r['new_term']})" if r["new_leader"] else "none"
            L.append(f"| {r['t'] - w0:.1f} | {r['action']} | {r['leader']} ({r['term']}) | {r['length']:.1f} | {new} | "
                     f"{fmt(r['elected'])} | {fmt(r['rebuilt'])} | {fmt(r['resumed'])} | {fmt(r['first_write'])} | "
                     f"{failed} |")
        skipped = [f for f in faults if f["kind"] == "master" and not f.get("victim_name")]
        if skipped:
            L.append(f"\n{len(skipped)} leader fault(s) found no leader to hit (none answered /health, none in "
                     f"etcd): nothing was done.")
        L.append("\n| failover | faults | median (s) | max (s) |")
        L.append("|---|---|---|---|")
        for label, key in (("elected (leader or rebuilding)", "elected"), ("rebuilt (leader)", "rebuilt"),
                           ("resumed (same leader, no election)", "resumed"),
                           ("first successful write", "first_write")):
            for action in ("kill", "stop", "all"):
                xs = [r[key] for r in rows if r[key] is not None and action in (r["action"], "all")]
                if xs:
                    L.append(f"| {label}, {action if action != 'all' else 'every leader fault'} | {len(xs)} | "
                             f"{statistics.median(xs):.2f} | {max(xs):.2f} |")
        L.append("")
        return L

    def plot(self, rss):
        if not shutil.which("gnuplot") or not rss:
            return False
        out = self.a.out
        names = sorted(n for n in rss if n.startswith(("node", "master")))
        for n in names:
            with open(os.path.join(out, f"rss-{n}.dat"), "w") as f:
                for t, k in rss[n]:
                    f.write(f"{t} {k / 1024:.1f}\n")
        cmds = ("set terminal pngcairo size 1000,500 noenhanced; set output '%s';"
                "set xlabel 'seconds'; set ylabel 'RSS MiB'; set key outside;"
                "plot %s" % (os.path.join(out, "rss.png"), ", ".join(
                    f"'{os.path.join(out, f'rss-{n}.dat')}' with lines title '{n}'" for n in names)))
        r = subprocess.run(["gnuplot", "-e", cmds], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            cmds = cmds.replace("pngcairo", "png")
            r = subprocess.run(["gnuplot", "-e", cmds], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return r.returncode == 0
