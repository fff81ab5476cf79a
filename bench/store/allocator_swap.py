#!/usr/bin/env python3
"""Does another malloc pay for the node binaries? (issue 18)

Runs store_bench (ours only, --no-redis) against node binaries
(mooncake_client, mooncake_master) running on glibc's allocator, mimalloc and
jemalloc (Debian's libmimalloc2.0 / libjemalloc2, put in front by LD_PRELOAD
in small wrappers passed as store_bench's --apps: only the node processes
change allocator; the bench process, which is the requester, stays on
glibc). The allocators alternate round by round so
machine load hits each alike; per row it prints the median over rounds and
the ratio to glibc (throughput: higher is better; latency: lower is better),
and one JSON line per row and allocator (bench_util format, baseline glibc).

Result (README, "Allocator"): mimalloc within noise of glibc (1.00-1.06x),
jemalloc worse; the node binaries stay on glibc. To measure again:
  make bench   # or: meson compile -C build-release (store_bench, apps)
  python3 bench/store/allocator_swap.py [--apps build-release/apps] [--rounds 3]
      [--sizes 4096,1M] [--concurrency 1,8] [--configs tcp]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

LIBDIR = "/usr/lib/x86_64-linux-gnu"
ALLOCATORS = {
    "glibc": None,
    "mimalloc": os.path.join(LIBDIR, "libmimalloc.so.2"),
    "jemalloc": os.path.join(LIBDIR, "libjemalloc.so.2"),
}


def wrap_apps(apps, preload, into):
    """A directory whose mooncake_client / mooncake_master run the real ones
    with `preload` in front (none: the real binaries)."""
    if not preload:
        return apps
    os.makedirs(into, exist_ok=True)
    for b in ("mooncake_client", "mooncake_master"):
        w = os.path.join(into, b)
        with open(w, "w") as f:
            f.write(f'#!/bin/sh\nLD_PRELOAD={preload} exec {os.path.abspath(os.path.join(apps, b))} "$@"\n')
        os.chmod(w, 0o755)
    return into


def run(store_bench, apps, a):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    cmd = [store_bench, "--no-redis", "--apps", apps, "--configs", a.configs, "--sizes", a.sizes, "--concurrency",
           a.concurrency, "--runs", str(a.runs), "--seconds", str(a.seconds)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        sys.exit(f"allocator_swap: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    rows = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            if "case" in r and "metric" in r:
                rows[(r["case"], r["metric"], r["unit"])] = r["value"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-release", help="build directory of store_bench")
    ap.add_argument("--apps", default="build-release/apps",
                    help="directory of mooncake_client and mooncake_master (on glibc's malloc)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="4096,1048576")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--configs", default="tcp")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.4)
    a = ap.parse_args()
    store_bench = os.path.join(a.build, "bench", "store", "store_bench")
    if not os.access(store_bench, os.X_OK):
        sys.exit(f"allocator_swap: {store_bench} not built (make bench builds it)")
    for name, lib in ALLOCATORS.items():
        if lib and not os.path.exists(lib):
            sys.exit(f"allocator_swap: {lib} missing for {name} (scripts/install-deps.sh --bench installs it)")
    client = os.path.join(a.apps, "mooncake_client")
    if not os.access(client, os.X_OK):
        sys.exit(f"allocator_swap: {client} not built (see --help)")
    if "mimalloc" in subprocess.run(["ldd", client], capture_output=True, text=True).stdout:
        sys.exit(f"allocator_swap: {client} links mimalloc: the glibc column needs binaries on glibc's malloc")
    seen = {name: {} for name in ALLOCATORS}
    with tempfile.TemporaryDirectory(prefix="allocator_swap.") as tmp:
        dirs = {name: wrap_apps(a.apps, lib, os.path.join(tmp, name)) for name, lib in ALLOCATORS.items()}
        for rnd in range(a.rounds):
            for name in ALLOCATORS:
                print(f"# round {rnd + 1}/{a.rounds}: {name}", file=sys.stderr, flush=True)
                for k, v in run(store_bench, dirs[name], a).items():
                    seen[name].setdefault(k, []).append(v)
    print(f"{'case':34} {'metric':10} {'glibc':>12} {'mimalloc':>12} {'ratio':>6} {'jemalloc':>12} {'ratio':>6}")
    for key in sorted(seen["glibc"]):
        case, metric, unit = key
        base = statistics.median(seen["glibc"][key])
        line = f"{case:34} {metric:10} {base:12.2f}"
        for name in ("mimalloc", "jemalloc"):
            vals = seen[name].get(key)
            if not vals:
                line += f" {'-':>12} {'-':>6}"
                continue
            m = statistics.median(vals)
            ratio = m / base if base else float("nan")
            line += f" {m:12.2f} {ratio:6.2f}"
            print(json.dumps({"bench": "allocator", "case": f"{case}_{name}", "metric": metric, "unit": unit,
                              "value": round(m, 4), "runs": len(vals), "baseline": "glibc_malloc",
                              "baseline_value": round(base, 4)}))
        print(line)
    print("# ratio = allocator / glibc: throughput higher is better, latency (p50, p99) lower is better")


if __name__ == "__main__":
    main()
