"""Self-test of the soak's checks (no cluster, no root): synthetic operation
logs with one planted fault each must give exactly the expected violation,
and a clean log none. Run: python3 test/soak/analyze_selftest.py"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analyze  # noqa: E402
import values  # noqa: E402
import worker  # noqa: E402


def write(path, recs):
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def run(case, reads, faults=(), verify=None, writes_extra=()):
    """w0 writes k (v1 at t=1, v2 at t=3, remove v3 at t=10, v4 at 20 failed);
    w1 reads as given. Returns the violation kinds."""
    k = "w0/k000"
    d = tempfile.mkdtemp(prefix="soak-selftest.")
    w0 = [
        {"i": 0, "op": "upsert", "k": [k], "v": [1], "n": [5000], "rc": [0], "t0": 1.0, "t1": 1.1},
        {"i": 1, "op": "upsert", "k": [k], "v": [2], "n": [12], "rc": [0], "t0": 3.0, "t1": 3.1},
        {"i": 2, "op": "remove", "k": [k], "v": [3], "n": [0], "rc": [0], "t0": 10.0, "t1": 10.1},
        {"i": 3, "op": "upsert", "k": [k], "v": [4], "n": [70000], "rc": [-900], "t0": 20.0, "t1": 20.1},
        *writes_extra,
    ]
    write(os.path.join(d, "ops-w0.jsonl"), w0)
    write(os.path.join(d, "ops-w1.jsonl"), reads)
    write(os.path.join(d, "verify.jsonl"), verify if verify is not None else [
        {"op": "verify", "k": [k], "rc": [-704], "got": [None], "t0": 100.0, "t1": 101.0, "since": 100.0}])
    an = analyze.Analyzer(d, list(faults), {0: 1, 1: None}, 10.0)
    an.check()
    kinds = sorted(v["kind"] for v in an.violations)
    print(f"{case}: {kinds} stale-allowed {an.stale}")
    return kinds


def read(t0, got, rc=1, op="get", bad=None):
    r = {"i": 0, "op": op, "k": ["w0/k000"], "rc": [rc], "got": [got], "t0": t0, "t1": t0 + 0.01}
    if bad:
        r["bad"] = bad
    return r


tiny_v2 = "tiny:" + values.make_value("w0/k000", 2, 12).hex()
fails = passes = 0


def expect(kinds, want):
    global fails, passes
    if kinds != want:
        print(f"  FAIL: expected {want}")
        fails += 1
    else:
        passes += 1


expect(run("clean", [read(1.5, 1), read(3.5, tiny_v2), read(12.0, None, rc=-704)]), [])
expect(run("stale without excuse", [read(8.0, 1)]), ["stale"])
expect(run("stale inside the window", [read(4.0, 1)]), [])
expect(run("stale after a master restart", [read(8.0, 1)],
           faults=[{"kind": "master", "node": 0, "start": 5.0, "end": 6.0}]), [])
expect(run("old version back after a late master restart", [read(9.0, 1)],
           faults=[{"kind": "master", "node": 0, "start": 8.0, "end": 8.5}]), ["resurrected"])
expect(run("resurrected after remove", [read(15.0, 2)]), ["stale"])
expect(run("phantom version", [read(2.0, 2)]), ["phantom"])
expect(run("failed write may be read", [read(20.05, 4)]), [])
expect(run("tiny garbage", [read(3.5, "tiny:" + "00" * 12)]), ["integrity"])
expect(run("torn value", [read(3.5, None, rc=5000, bad=["w0/k000: torn"])]), ["integrity"])
expect(run("deadline", [dict(read(3.5, 2), t1=3.5 + 16.0)]), ["deadline"])
expect(run("spurious overflow", [read(3.5, None, rc=-10)]), ["overflow"])
expect(run("hung operation", [read(3.5, 2), {"op": "hung", "i": 1, "what": "get_batch", "k": ["w0/k000"],
                                            "t0": 4.0, "t1": 64.0, "rc": []}]), ["hung"])
lost = [{"i": 4, "op": "upsert", "k": ["w0/k000"], "v": [5], "n": [100], "rc": [0], "t0": 30.0, "t1": 30.1}]
expect(run("lost key", [], writes_extra=lost), ["liveness"])
expect(run("lost key, holder killed", [], writes_extra=lost,
           faults=[{"kind": "kill", "node": 1, "start": 40.0, "end": 42.0}]), [])
expect(run("lost key, another node killed", [], writes_extra=lost,
           faults=[{"kind": "kill", "node": 2, "start": 40.0, "end": 42.0}]), ["liveness"])
# A leader failover: gets failing with the retriable codes are outcomes, not
# violations; a value read during it is still checked.
leader_kill = [{"kind": "master", "node": 0, "start": 4.0, "end": 5.0, "action": "kill", "victim_name": "master0",
                "term": 7}]
expect(run("retriable failures during a failover",
           [read(4.2, None, rc=-1010), read(4.5, None, rc=-900), read(4.8, None, rc=-1100),
            read(5.0, None, rc=-1010, op="batch_get"), read(6.0, 2)], faults=leader_kill), [])
expect(run("wrong bytes during a failover", [read(4.5, None, rc=12, bad=["w0/k000: torn"])], faults=leader_kill),
       ["integrity"])


def check_failover():
    """failover(): elected / rebuilt / resumed / first write from synthetic samples."""
    global fails, passes
    mh = {"master0": [(3.9, "leader", 7), (4.1, None, None), (6.5, "standby", 9)],
          "master1": [(3.9, "standby", 0), (6.2, "rebuilding", 9), (6.3, "rebuilding", 9), (7.0, "leader", 9),
                      (30.0, "leader", 12)]}
    writes = [(3.0, 3.5), (4.5, 7.4), (5.0, 7.2), (8.0, 8.1)]
    fl = [(4.2, -1010), (4.3, -900), (6.9, -1010), (7.5, -900)]
    r = analyze.failover(leader_kill[0], mh, writes, fl, until=20.0)
    got = (round(r["elected"], 2), round(r["rebuilt"], 2), r["resumed"], round(r["first_write"], 2), r["new_leader"],
           r["new_term"], r["failed"])
    want = (2.2, 3.0, None, 3.2, "master1", 9, {"RPC_FAIL": 1, "UNAVAILABLE_IN_CURRENT_STATUS": 2})
    # A SIGSTOP shorter than the lease: no new term, the same leader answers again (after the
    # SIGCONT: the reply received at 4.05 left before the SIGSTOP).
    stop = {"kind": "master", "node": 0, "start": 4.0, "end": 5.2, "action": "stop", "victim_name": "master0",
            "term": 7}
    mh2 = {"master0": [(3.9, "leader", 7), (4.05, "leader", 7), (4.5, None, None), (5.3, "leader", 7)],
           "master1": [(5.0, "standby", 0)]}
    r2 = analyze.failover(stop, mh2, writes, fl, until=20.0)
    got2 = (r2["elected"], r2["rebuilt"], round(r2["resumed"], 2))
    rows = analyze.failover_rows([dict(leader_kill[0]), {"kind": "kill", "node": 1, "start": 1.0, "end": 2.0}], mh,
                                 writes, fl, 1e18)
    print(f"failover: {got}; kept lease: {got2}; rows {len(rows)}")
    if got != want or got2 != (None, None, 1.3) or len(rows) != 1:
        print(f"  FAIL: expected {want}, (None, None, 1.3), 1 row")
        fails += 1
    else:
        passes += 1


check_failover()
assert worker.SLOT >= worker.MAX_VALUE
print(f"{passes} passed, {fails} failed")
sys.exit(1 if fails else 0)
