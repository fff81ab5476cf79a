#!/usr/bin/env python3
"""Benchmark report of `make bench` (scripts/bench.sh). Python standard library
plus gnuplot (Debian gnuplot-nox) for the plots.

  bench_report.py machine [--quick 0|1] [--build DIR]   JSON line: machine, commit, start time
  bench_report.py end --seconds N                        JSON line: end time, load average
  bench_report.py report DIR                             DIR/results.jsonl -> DIR/report.md, DIR/plots/

results.jsonl holds three kinds of lines: {"type":"machine",...} and
{"type":"end",...}, {"type":"program",...} (one per program run: arguments,
exit status, seconds), and the programs' own result lines
{"bench","case","metric","unit","value","baseline","baseline_value","runs","spread"}
(bench/common/bench_util.hpp), copied verbatim.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import subprocess
import sys

from bench_plots import MIN_RUNS, NOISY_SPREAD, lower_is_better, make_plots, noisy, ratio, speedup

SAME = 0.05  # ratios within 5 % of 1 count as "same"

AREAS = [  # bench field, title, program, what it compares
    ("runtime", "Runtime", "runtime_bench",
     "async mutex costs; O_DIRECT sequential file I/O on the runtime's io_uring vs fio (io_uring, direct=1)"),
    ("rpc", "RPC", "rpc_bench",
     "64-byte calls over TCP loopback: mc::rpc vs Cap'n Proto's own kj event loop; raw asio ping-pong is the floor"),
    ("transfer", "Transfer", "transfer_bench",
     "TransferEngine between two processes: TCP vs a raw TCP pump, same-host (process_vm_*) vs memcpy; both "
     "processes' regions are huge-page backed (MADV_HUGEPAGE) since 2026-12-05 (bench/README.md)"),
    ("tiered", "Tiers", "tier_bench", "SSD tier put/get vs fio on the same directory; DRAM allocator rates"),
    ("store", "Store vs Redis", "store_bench",
     "remote get/put between two client processes vs redis-server + redis-benchmark "
     "(tcp: Redis over TCP; shm: same-host transport vs Redis over a unix socket)"),
    ("store_curves", "Store vs Redis: curves", "store_bench --curves",
     "remote gets as in 'Store vs Redis', swept: 4 KiB values at 1..256 requests in flight, and 512 B..64 MiB values "
     "at 8 in flight; Redis holds every key of the size before its GETs (redis-cli SET of each key redis-benchmark "
     "draws from; the keyspace is ours: 64 keys, 16 from 1 MiB)"),
    ("store_cost", "Store vs Redis: cost per operation", "store_bench",
     "what one operation of the 'Store vs Redis' cases costs the whole machine, measured in separate runs with "
     "counters on: CPU microseconds (user + system) and system calls (perf counters on raw_syscalls:sys_enter, "
     "io_uring_enter included) summed over every process of the side: ours the client, the owner and the master; "
     "Redis redis-server and redis-benchmark (bench/common/op_cost.hpp)"),
    ("inference", "Inference workloads", "inference_bench",
     "connector-shaped batches (sglang 128 x 1 MiB, vllm 64 x 2 MiB in 64 x 32 KiB pieces, lmcache 32 MiB chunks, "
     "4 KiB values in batches of 32 and single gets) from one client to an owner mooncake_client; tcp: vs a raw TCP "
     "pump and Redis over TCP; shm: same-host transport vs memcpy and Redis over a unix socket (libhiredis, pipelined; "
     "big values a 1 MiB window at a time since 2026-12-05). Caller buffers are huge-page backed since 2026-12-05 "
     "(bench/README.md). The *target* column is the goal of issue 14 for the row's ratio"),
    ("python", "Python API", "python_bench.py",
     "the sglang / vllm / lmcache batches (values >= 1 MiB) through MooncakeDistributedStore from Python vs the same "
     "batches through the C++ API (mc::store::client) with the same node options, both to one owner mooncake_client; "
     "target (issue 15): Python >= 0.9 x C++"),
    ("master", "Master at scale", "master_bench",
     "a mooncake_master (2 RPC threads) over its real RPC from simulated clients: batched publishes and lookups "
     "(keys/s and keys per master CPU-second), memory per key (64-byte keys, one replica); absolute targets of "
     "issue 16: <= 200 B/key, lookups >= 1 M keys/s, publishes >= 500 k keys/s (no baseline)"),
]


# ------------------------------------------------------------------ machine

def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def machine(args):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    compiler = _run(["c++", "--version"]).splitlines()
    rec = {
        "type": "machine",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "commit": _run(["git", "rev-parse", "HEAD"]),
        "commit_short": _run(["git", "rev-parse", "--short", "HEAD"]),
        "dirty": bool(dirty),
        "cpu_model": cpu or platform.processor(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "os": _os_name(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "compiler": compiler[0] if compiler else "",
        "build": args.build,
        "quick": bool(int(args.quick)),
    }
    print(json.dumps(rec))


def _os_name():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def end(args):
    print(json.dumps({"type": "end",
                      "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                      "seconds": int(args.seconds), "load_average": [round(x, 2) for x in os.getloadavg()]}))


# ------------------------------------------------------------------- rows

def trust_note(r):
    notes = []
    if r.get("runs", 0) < MIN_RUNS:
        notes.append(f"**{r.get('runs', 0)} run{'s' if r.get('runs', 0) != 1 else ''}**")
    if r.get("spread", 0) > NOISY_SPREAD:
        notes.append(f"**noisy** ({r['spread'] * 100:.0f} %)")
    return ", ".join(notes)


def num(v):
    if v is None:
        return "–"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.2f} M"
    if a >= 1e4:
        return f"{v / 1e3:.1f} k"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def verdict(r):
    s = speedup(r)
    if s is None:
        return ""
    if abs(s - 1) <= SAME:
        return "≈"
    return "ours better" if s > 1 else "baseline better"


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def load(path):
    meta, end_rec, programs, rows = {}, {}, [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                print(f"bench_report: {path}:{n}: not JSON, skipped", file=sys.stderr)
                continue
            t = rec.get("type")
            if t == "machine":
                meta = rec
            elif t == "end":
                end_rec = rec
            elif t == "program":
                programs.append(rec)
            elif "bench" in rec and "value" in rec:
                rows.append(rec)
    return meta, end_rec, programs, rows


# ----------------------------------------------------------------- report

def fmt_secs(s):
    s = int(s)
    return f"{s // 60}:{s % 60:02d}"


def summary_table(rows):
    out = ["| area | results | with baseline | ours better / ≈ / worse | speed-up vs baseline, throughput (geo-mean) "
           "| speed-up vs baseline, latency (geo-mean) | noisy or < 3 runs |",
           "|---|---:|---:|:---:|---:|---:|---:|"]
    for key, title, _, _ in AREAS:
        rs = [r for r in rows if r["bench"] == key]
        if not rs:
            out.append(f"| {title} | 0 | | | | | |")
            continue
        with_b = [r for r in rs if speedup(r) is not None]
        better = sum(1 for r in with_b if speedup(r) > 1 + SAME)
        worse = sum(1 for r in with_b if speedup(r) < 1 - SAME)
        same = len(with_b) - better - worse
        thr = geomean([speedup(r) for r in with_b if not lower_is_better(r)])
        lat = geomean([speedup(r) for r in with_b if lower_is_better(r)])
        nz = sum(1 for r in rs if noisy(r))
        out.append(f"| {title} | {len(rs)} | {len(with_b)} | {better} / {same} / {worse} | "
                   f"{'–' if thr is None else f'{thr:.2f}×'} | {'–' if lat is None else f'{lat:.2f}×'} | {nz} |")
    return out


KEY_RESULTS = [  # (bench, case regex, metric): the first matching row of each goes into "Key results"
    ("runtime", r"file_read_1MiB_qd8", "throughput"),
    ("runtime", r"async_mutex_uncontended", "latency"),
    ("rpc", r"call_64B_qd1", "p50_latency"),
    ("rpc", r"call_64B_qd64", "throughput"),
    ("transfer", r"tcp_read_16MiB_b16_t1", "throughput"),
    ("transfer", r"shm_read_16MiB_b16_t1", "throughput"),
    ("tiered", r"ssd_get_1MiB_qd8", "throughput"),
    ("tiered", r"ssd_put_1MiB_qd8", "throughput"),
    ("store", r"tcp_get_4KiB_c1", "p50"),
    ("store", r"tcp_get_4KiB_c8", "throughput"),
    ("store", r"tcp_get_1MiB_c8", "throughput"),
    ("store", r"shm_get_4KiB_c1", "p50"),
    ("store", r"shm_get_1MiB_c8", "throughput"),
    ("store", r"shm_put_1MiB_c8", "throughput"),
    ("inference", r"tcp_sglang_get", "throughput"),
    ("inference", r"shm_sglang_get", "throughput"),
    ("inference", r"tcp_vllm_get(_contig)?", "throughput"),
    ("inference", r"tcp_small_get_4KiB_c1", "p50"),
]


def key_table(rows):
    picked = []
    for bench, case, metric in KEY_RESULTS:
        for r in rows:
            if r["bench"] == bench and r["metric"] == metric and re.fullmatch(case, r["case"]):
                picked.append(r)
                break
    if not picked:
        return []
    out = ["| area | case | metric | ours | baseline | ratio | verdict | trust |", "|---|---|---|---:|---:|---:|---|---|"]
    for r in picked:
        x = ratio(r)
        out.append(f"| {r['bench']} | {r['case']} | {r['metric']} | {num(r['value'])} {r['unit']} | "
                   f"{(r.get('baseline') or '–') + ' ' + num(r.get('baseline_value')) if x is not None else '–'} | "
                   f"{'–' if x is None else f'{x:.2f}'} | {verdict(r)} | {trust_note(r)} |")
    return out


def target_cell(r):
    """Rows with a goal on their ratio ("target": ">= 0.80", "met": bool; bench_util's report_target)."""
    if "target" not in r:
        return ""
    return f"{r['target']} × baseline: " + ("**met**" if r.get("met") else "**missed**")


def area_table(rs):
    targets = any("target" in r for r in rs)
    out = ["| case | metric | ours | unit | baseline | baseline value | ratio ours/baseline | |"
           + (" target |" if targets else "") + " runs | spread | trust |",
           "|---|---|---:|---|---|---:|---:|---|" + ("---|" if targets else "") + "---:|---:|---|"]
    for r in rs:
        x = ratio(r)
        arrow = " (lower is better)" if lower_is_better(r) and x is not None else ""
        out.append("| {case} | {metric} | {v} | {unit} | {b} | {bv} | {ratio}{arrow} | {verd} |{tgt} {runs} | {sp} | {trust} |".format(
            case=r["case"], metric=r["metric"], v=num(r["value"]), unit=r["unit"], b=r.get("baseline", "") or "–",
            bv=num(r.get("baseline_value")), ratio="–" if x is None else f"{x:.2f}", arrow=arrow, verd=verdict(r),
            tgt=f" {target_cell(r)} |" if targets else "",
            runs=r.get("runs", ""), sp=f"{r.get('spread', 0) * 100:.0f} %", trust=trust_note(r)))
    met = [r for r in rs if "target" in r]
    if met:
        out += ["", f"Targets: {sum(1 for r in met if r.get('met'))} of {len(met)} met."]
    return out


def report(args):
    d = args.dir
    meta, end_rec, programs, rows = load(os.path.join(d, "results.jsonl"))
    plots_dir = os.path.join(d, "plots")
    os.makedirs(plots_dir, exist_ok=True)
    plots, plot_note = make_plots(rows, plots_dir)

    L = ["# mooncake-p2p benchmark report", ""]
    if meta:
        commit = meta.get("commit_short", "?") + (" (uncommitted changes in the tree)" if meta.get("dirty") else "")
        L.append(f"- **commit** `{commit}` ({meta.get('commit', '')}), {meta.get('date', '')}, "
                 f"{'QUICK (reduced) matrix' if meta.get('quick') else 'full matrix'}, build `{meta.get('build', '')}` "
                 f"(release)")
        L.append(f"- **machine** {meta.get('cpu_model', '?')}, {meta.get('cores', '?')} cores, "
                 f"{meta.get('memory_gib', '?')} GiB RAM, kernel {meta.get('kernel', '?')}, {meta.get('os', '')}, "
                 f"{meta.get('compiler', '')}")
        la = meta.get("load_average")
        le = end_rec.get("load_average") if end_rec else None
        if la:
            s = f"- **load average** {la[0]:.2f} at the start"
            if le:
                s += f", {le[0]:.2f} at the end"
            cores = meta.get("cores") or 1
            if max(la[0], le[0] if le else 0) > 0.5 * cores:
                s += f" — the machine was busy (> half of its {cores} cores): expect noisy numbers"
            L.append(s)
    if end_rec:
        L.append(f"- **duration** {fmt_secs(end_rec.get('seconds', 0))} of benchmarks")
    L += ["",
          "How to read: every value is the **median** of the repeated runs; **ratio** = ours / baseline, both measured "
          "in the same run on the same machine; for latency rows (us, ns/op) lower is better, so a ratio below 1 "
          "means ours is faster. *Speed-up* in the summary turns every ratio into \"> 1 = ours better\". "
          f"**spread** = (max − min) / median of our runs; rows with a spread above {NOISY_SPREAD * 100:.0f} % or "
          f"fewer than {MIN_RUNS} runs are marked in the *trust* column and should not be trusted "
          "(the baseline's own spread is not recorded).", ""]

    failed = [p for p in programs if p.get("hung_at_exit") or p.get("exit", 0) != 0
              or p.get("results", 0) < p.get("expected", 0)]
    L += ["## Summary", ""] + summary_table(rows) + [""]
    targeted = [r for r in rows if "target" in r]
    if targeted:
        missed = [r for r in targeted if not r.get("met")]
        L += [f"Targets (issues 14 and 15, `inference_bench`, `python_bench.py`): {len(targeted) - len(missed)} of "
              f"{len(targeted)} met"
              + (": missed " + ", ".join(f"{r['case']} {r['metric']} vs {r.get('baseline')} "
                                         f"({ratio(r) or 0:.2f}, target {r['target']})" for r in missed)
                 if missed else "") + ".", ""]
    key = key_table(rows)
    if key:
        L += ["Key results:", ""] + key + [""]
    if failed:
        for p in failed:
            why = {0: "exited normally", 124: "timed out"}.get(p.get("exit"), f"failed (exit status {p.get('exit')})")
            if p.get("hung_at_exit"):
                why = "did not exit after its last result (stopped by bench.sh; a bug in the program)"
            log = p.get("log", f"logs/{p['program']}.log")
            L.append(f"- **{p['program']}** `{p.get('args', '')}` {why}; printed {p.get('results')} of the "
                     f"{p.get('expected')} expected results (see {log[:-4]}.err)")
        L.append("")

    for key, title, prog, what in AREAS:
        rs = [r for r in rows if r["bench"] == key]
        L += [f"## {title} ({prog})", "", what + ".", ""]
        if not rs:
            L += ["Not run.", ""]
            continue
        L += area_table(rs) + [""]
        for name, caption in plots.get(key, []):
            L += [f"![{caption}](plots/{name}.png)", f"*{caption}* ([SVG](plots/{name}.svg))", ""]
    other = sorted({r["bench"] for r in rows} - {a[0] for a in AREAS})
    for key in other:
        L += [f"## {key}", ""] + area_table([r for r in rows if r["bench"] == key]) + [""]
    if plots.get("overview"):
        L += ["## Overview", ""]
        for name, caption in plots["overview"]:
            L += [f"![{caption}](plots/{name}.png)", f"*{caption}* ([SVG](plots/{name}.svg))", ""]
    if plot_note:
        L += [f"*Plots: {plot_note}*", ""]

    L += ["## Programs", "", "| program | arguments | exit | results | seconds |", "|---|---|---:|---:|---:|"]
    for p in programs:
        ex = f"{p.get('exit')}" + (" (hung at exit, stopped)" if p.get("hung_at_exit") else "")
        L.append(f"| {p['program']} | `{p.get('args', '')}` | {ex} | {p.get('results')}/{p.get('expected')} "
                 f"| {p.get('seconds')} |")
    L += ["", "Raw data: `results.jsonl` (machine description, one line per result, one line per program run); "
          "full program output in `logs/`.", ""]
    with open(os.path.join(d, "report.md"), "w") as f:
        f.write("\n".join(L))
    print(f"bench_report: wrote {os.path.join(d, 'report.md')} ({len(rows)} results, "
          f"{sum(len(v) for v in plots.values())} plots)")


# ------------------------------------------------------------------ plots

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("machine")
    m.add_argument("--quick", default="0")
    m.add_argument("--build", default="")
    e = sub.add_parser("end")
    e.add_argument("--seconds", type=float, default=0)
    r = sub.add_parser("report")
    r.add_argument("dir")
    args = ap.parse_args()
    {"machine": machine, "end": end, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
