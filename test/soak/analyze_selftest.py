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
lost = [{"i": 4, "op": "upsert", "k": ["w0/k000"], "v": [5], "n": [100], "rc": [0], "t0": 30.0, "t1": 30.1}]
expect(run("lost key", [], writes_extra=lost), ["liveness"])
expect(run("lost key, holder killed", [], writes_extra=lost,
           faults=[{"kind": "kill", "node": 1, "start": 40.0, "end": 42.0}]), [])
expect(run("lost key, another node killed", [], writes_extra=lost,
           faults=[{"kind": "kill", "node": 2, "start": 40.0, "end": 42.0}]), ["liveness"])
assert worker.SLOT >= worker.MAX_VALUE
print(f"{passes} passed, {fails} failed")
sys.exit(1 if fails else 0)
