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
import shutil
import statistics
import subprocess
import sys

NOISY_SPREAD = 0.20  # (max - min) / median of our runs above this: do not trust the row
MIN_RUNS = 3
SAME = 0.05  # ratios within 5 % of 1 count as "same"

AREAS = [  # bench field, title, program, what it compares
    ("runtime", "Runtime", "runtime_bench",
     "async mutex costs; O_DIRECT sequential file I/O on the runtime's io_uring vs fio (io_uring, direct=1)"),
    ("rpc", "RPC", "rpc_bench",
     "64-byte calls over TCP loopback: mc::rpc vs Cap'n Proto's own kj event loop; raw asio ping-pong is the floor"),
    ("transfer", "Transfer", "transfer_bench",
     "TransferEngine between two processes: TCP vs a raw TCP pump, same-host (process_vm_*) vs memcpy"),
    ("tiered", "Tiers", "tier_bench", "SSD tier put/get vs fio on the same directory; DRAM allocator rates"),
    ("store", "Store vs Redis", "store_bench",
     "remote get/put between two client processes vs redis-server + redis-benchmark "
     "(tcp: Redis over TCP; shm: same-host transport vs Redis over a unix socket)"),
    ("inference", "Inference workloads", "inference_bench",
     "connector-shaped batches (sglang 128 x 1 MiB, vllm 64 x 2 MiB in 64 x 32 KiB pieces, lmcache 32 MiB chunks, "
     "4 KiB values in batches of 32 and single gets) from one client to an owner mooncake_client; tcp: vs a raw TCP "
     "pump and Redis over TCP; shm: same-host transport vs memcpy and Redis over a unix socket (libhiredis, pipelined). "
     "The *target* column is the goal of issue 14 for the row's ratio"),
    ("python", "Python API", "python_bench.py",
     "the sglang / vllm / lmcache batches (values >= 1 MiB) through MooncakeDistributedStore from Python vs the same "
     "batches through the C++ API (mc::store::client) with the same node options, both to one owner mooncake_client; "
     "target (issue 15): Python >= 0.9 x C++"),
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

def lower_is_better(r):
    u = r.get("unit", "")
    m = r.get("metric", "")
    return u in ("us", "ms", "ns", "ns/op", "s") or "latency" in m or re.fullmatch(r"p\d+", m) is not None


def ratio(r):
    b = r.get("baseline_value")
    if b is None or not r.get("baseline"):
        return None
    if b <= 0:
        return None
    return r["value"] / b


def speedup(r):
    """> 1: ours is better than the baseline, whatever the metric's direction."""
    x = ratio(r)
    if x is None or x <= 0:
        return None
    return 1 / x if lower_is_better(r) else x


def noisy(r):
    return r.get("spread", 0) > NOISY_SPREAD or r.get("runs", 0) < MIN_RUNS


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

SIZE_RE = r"(\d+)(KiB|MiB)"


def size_bytes(n, unit):
    return int(n) << (10 if unit == "KiB" else 20)


def size_label(b):
    return f"{b >> 20}MiB" if b >= 1 << 20 else f"{b >> 10}KiB"


COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]


class Figure:
    """One gnuplot multiplot figure written as PNG and SVG."""

    def __init__(self, name, title, rows, cols, width=1400, height=1000):
        self.name, self.title, self.rows, self.cols = name, title, rows, cols
        self.width, self.height = width, height
        self.panels = []  # (settings lines, [(datafile, using, title, style)])

    def panel(self, settings, series):
        self.panels.append((settings, series))

    def script(self, directory):
        body = [f'set multiplot layout {self.rows},{self.cols} title "{self.title}" font ",14"']
        for settings, series in self.panels:
            body += ["reset", "set grid", "set key below font \",9\" maxrows 3 samplen 3", "set tics font \",9\""]
            body += settings
            parts = []
            for datafile, using, title, style in series:
                parts.append(f"'{datafile}' using {using} title \"{title}\" {style}")
            body.append("plot " + ", \\\n     ".join(parts) if parts else "plot 1/0 notitle")
        body.append("unset multiplot")
        s = [f"cd '{directory}'",
             f"set terminal pngcairo size {self.width},{self.height} font \"sans,10\" noenhanced",
             f"set output '{self.name}.png'"] + body
        s += [f"set terminal svg size {self.width},{self.height} font \"sans,10\" noenhanced dynamic",
              f"set output '{self.name}.svg'"] + body + ["unset output"]
        return "\n".join(s) + "\n"


def write_dat(directory, name, header, points):
    path = os.path.join(directory, "data", name)
    with open(path, "w") as f:
        f.write("# " + " ".join(header) + "\n")
        for p in points:
            f.write(" ".join(str(x) for x in p) + "\n")
    return "data/" + name


def by_case(rows, bench, regex):
    """{(groups...): {metric: row}} for the rows of bench whose case matches regex."""
    out = {}
    for r in rows:
        if r["bench"] != bench:
            continue
        m = re.fullmatch(regex, r["case"])
        if m:
            out.setdefault(m.groups(), {})[r["metric"]] = r
    return out


def plot_store(rows, directory):
    cases = by_case(rows, "store", r"(tcp|shm)_(get|put)_" + SIZE_RE + r"_c(\d+)")
    if not cases:
        return []
    figs = []
    configs = [c for c in ("tcp", "shm") if any(k[0] == c for k in cases)]
    ops = [o for o in ("put", "get") if any(k[1] == o for k in cases)]
    concs = sorted({int(k[4]) for k in cases})
    sizes = sorted({size_bytes(k[2], k[3]) for k in cases})
    base_name = {"tcp": "redis tcp", "shm": "redis unix socket"}
    # Throughput (MiB/s) vs value size, one line per concurrency, ours solid, Redis dashed.
    f = Figure("store_throughput", "store: remote get/put throughput vs value size (ours solid, Redis dashed)",
               len(ops), len(configs))
    for op in ops:
        for cfg in configs:
            series, base = [], []
            for i, c in enumerate(concs):
                pts = []
                for k, ms in cases.items():
                    if k[0] == cfg and k[1] == op and int(k[4]) == c and "throughput" in ms:
                        r = ms["throughput"]
                        b = size_bytes(k[2], k[3])
                        pts.append((b, r["value"] * b / 2**20, (r.get("baseline_value") or 0) * b / 2**20))
                pts.sort()
                if not pts:
                    continue
                dat = write_dat(directory, f"store_thr_{cfg}_{op}_c{c}.dat", ["bytes", "ours_MiBs", "base_MiBs"], pts)
                col = COLORS[i % len(COLORS)]
                series.append((dat, "1:2", f"ours, {c} in flight", f"with linespoints lw 2 pt 7 lc rgb '{col}'"))
                if any(p[2] > 0 for p in pts):
                    base.append((dat, "1:($3>0?$3:1/0)", f"{base_name[cfg]}, {c} in flight",
                                 f"with linespoints lw 2 dt 2 pt 6 lc rgb '{col}'"))
            rows_ = max(len(series), 1)
            series += base
            f.panel([f'set title "{cfg} {op}"', f"set key maxrows {rows_}", "set logscale x 2", "set logscale y 10",
                     'set xlabel "value size"', 'set ylabel "MiB/s"',
                     f"set xrange [{sizes[0] / 1.4}:{sizes[-1] * 1.4}]",
                     "set xtics (" + ", ".join(f'"{size_label(s)}" {s}' for s in sizes) + ")"], series)
    figs.append((f, "store: throughput (MiB/s = ops/s × value size) vs value size, ours vs Redis"))
    # Latency percentiles vs concurrency, one figure per value size.
    for s in sizes:
        name = f"store_latency_{size_label(s)}"
        f = Figure(name, f"store: latency vs requests in flight, {size_label(s)} values", len(ops), len(configs))
        for op in ops:
            for cfg in configs:
                pts = []
                for k, ms in cases.items():
                    if k[0] == cfg and k[1] == op and size_bytes(k[2], k[3]) == s and "p50" in ms and "p99" in ms:
                        pts.append((int(k[4]), ms["p50"]["value"], ms["p99"]["value"],
                                    ms["p50"].get("baseline_value") or 0, ms["p99"].get("baseline_value") or 0))
                pts.sort()
                if not pts:
                    continue
                dat = write_dat(directory, f"store_lat_{cfg}_{op}_{size_label(s)}.dat",
                                ["inflight", "ours_p50", "ours_p99", "base_p50", "base_p99"], pts)
                series = [(dat, "1:2", "ours p50", f"with linespoints lw 2 pt 7 lc rgb '{COLORS[0]}'"),
                          (dat, "1:3", "ours p99", f"with linespoints lw 2 pt 5 lc rgb '{COLORS[1]}'")]
                if any(p[3] > 0 for p in pts):
                    series += [(dat, "1:($4>0?$4:1/0)", f"{base_name[cfg]} p50",
                                f"with linespoints lw 2 dt 2 pt 6 lc rgb '{COLORS[0]}'"),
                               (dat, "1:($5>0?$5:1/0)", f"{base_name[cfg]} p99",
                                f"with linespoints lw 2 dt 2 pt 4 lc rgb '{COLORS[1]}'")]
                f.panel([f'set title "{cfg} {op}"', "set logscale x 2", "set logscale y 10", "set key maxrows 2",
                         'set xlabel "requests in flight"', 'set ylabel "latency (us)"',
                         "set xtics (" + ", ".join(f'"{c}" {c}' for c in concs) + ")",
                         f"set xrange [{concs[0] / 1.3}:{concs[-1] * 1.3}]"], series)
        figs.append((f, f"store: p50/p99 latency vs requests in flight, {size_label(s)} values, ours vs Redis"))
    return figs


def plot_transfer(rows, directory):
    cases = by_case(rows, "transfer", r"(tcp|shm)_(read|write)_" + SIZE_RE + r"_b(\d+)_t(\d+)")
    if not cases:
        return []
    transports = [t for t in ("tcp", "shm") if any(k[0] == t for k in cases)]
    ops = [o for o in ("read", "write") if any(k[1] == o for k in cases)]
    threads = sorted({int(k[5]) for k in cases})
    batches = sorted({int(k[4]) for k in cases})
    sizes = sorted({size_bytes(k[2], k[3]) for k in cases})
    base_name = {"tcp": "raw TCP pump", "shm": "memcpy"}
    figs = []
    for t in threads:  # one figure per initiator thread count, one line per batch size
        tn = f"{t} initiator thread{'s' if t > 1 else ''}"
        name = "transfer_throughput" + (f"_t{t}" if len(threads) > 1 else "")
        f = Figure(name, f"transfer: throughput vs request size, {tn} (ours solid, baseline dashed)",
                   len(ops), len(transports))
        for op in ops:
            for tr in transports:
                series, base = [], []
                for i, b in enumerate(batches):
                    pts = []
                    for k, ms in cases.items():
                        if k[0] == tr and k[1] == op and int(k[4]) == b and int(k[5]) == t and "throughput" in ms:
                            r = ms["throughput"]
                            pts.append((size_bytes(k[2], k[3]), r["value"], r.get("baseline_value") or 0))
                    pts.sort()
                    if not pts:
                        continue
                    dat = write_dat(directory, f"transfer_{tr}_{op}_b{b}_t{t}.dat", ["bytes", "ours_GBs", "base_GBs"],
                                    pts)
                    col = COLORS[i % len(COLORS)]
                    series.append((dat, "1:2", f"ours, batch {b}", f"with linespoints lw 2 pt 7 lc rgb '{col}'"))
                    base.append((dat, "1:($3>0?$3:1/0)", f"{base_name[tr]}, batch {b}",
                                 f"with linespoints lw 2 dt 2 pt 6 lc rgb '{col}'"))
                rows_ = max(len(series), 1)
                series += base
                f.panel([f'set title "{tr} {op}"', f"set key maxrows {rows_}", "set logscale x 2", 'set xlabel "request size"',
                         f"set xrange [{sizes[0] / 1.4}:{sizes[-1] * 1.4}]", 'set ylabel "GB/s"', "set yrange [0:*]",
                         "set xtics (" + ", ".join(f'"{size_label(s)}" {s}' for s in sizes) + ")"], series)
        figs.append((f, f"transfer: throughput vs request size, {tn}, ours vs raw TCP pump / memcpy"))
    return figs


def plot_rpc(rows, directory):
    cases = by_case(rows, "rpc", r"(call_64B|call_64B_plain_method|pingpong_64B_asio_floor)_qd(\d+)")
    if not cases:
        return []
    impls = [("call_64B", "ours (mc::rpc, coroutine method)"),
             ("call_64B_plain_method", "ours (plain KJ method)"),
             ("pingpong_64B_asio_floor", "raw asio ping-pong (floor)")]
    qds = sorted({int(k[1]) for k in cases})
    f = Figure("rpc_latency", "rpc: 64-byte calls vs calls in flight", 1, 3, 1500, 600)
    dats = {}
    for impl, _ in impls:
        pts = []
        for q in qds:
            ms = cases.get((impl, str(q)), {})
            if all(m in ms for m in ("p50_latency", "p99_latency", "throughput")):
                pts.append((q, ms["p50_latency"]["value"], ms["p99_latency"]["value"], ms["throughput"]["value"],
                            ms["p50_latency"].get("baseline_value") or 0, ms["p99_latency"].get("baseline_value") or 0,
                            ms["throughput"].get("baseline_value") or 0))
        if pts:
            dats[impl] = write_dat(directory, f"rpc_{impl}.dat", ["inflight", "p50", "p99", "calls_s", "kj_p50",
                                                                   "kj_p99", "kj_calls_s"], pts)
    xt = ["set logscale x 2", 'set xlabel "calls in flight"', "set xtics (" + ", ".join(f'"{q}" {q}' for q in qds) + ")",
          f"set xrange [{qds[0] / 1.3}:{qds[-1] * 1.3}]"]
    for col, metric, ylabel, log in ((2, "p50 latency", "us", True), (3, "p99 latency", "us", True),
                                     (4, "throughput", "calls/s", False)):
        series = []
        for i, (impl, label) in enumerate(impls):
            if impl in dats:
                series.append((dats[impl], f"1:{col}", label, f"with linespoints lw 2 pt 7 lc rgb '{COLORS[i]}'"))
        if "call_64B" in dats:
            series.append((dats["call_64B"], f"1:(${col + 3}>0?${col + 3}:1/0)", "capnp kj loop (baseline)",
                           f"with linespoints lw 2 dt 2 pt 6 lc rgb '{COLORS[4]}'"))
        f.panel([f'set title "{metric}"', f'set ylabel "{ylabel}"', "set key maxrows 2"] + xt +
                (["set logscale y 10"] if log else ["set yrange [0:*]"]), series)
    return [(f, "rpc: p50/p99 latency and calls/s vs calls in flight, ours vs capnp's kj loop and the asio floor")]


def plot_overview(rows, directory):
    rs = [r for r in rows if speedup(r) is not None and not lower_is_better(r)]
    if not rs:
        return []
    # One figure, or one per area when there are too many rows for one readable picture.
    groups = [("overview", rs)] if len(rs) <= 90 else [
        (f"overview_{a}", [r for r in rs if r["bench"] == a]) for a in dict.fromkeys(r["bench"] for r in rs)]
    figs = []
    for name, grp in groups:
        pts = []
        for i, r in enumerate(grp):
            label = f"{r['bench']}: {r['case']} vs {r['baseline']}"
            pts.append((i, speedup(r), 1 if noisy(r) else 0, '"' + label.replace('"', "'") + '"'))
        dat = write_dat(directory, name + ".dat", ["index", "speedup", "noisy", "label"], pts)
        h = max(400, 140 + 16 * len(grp))
        f = Figure(name, "throughput ratio ours / baseline (> 1: ours faster; grey: noisy or < 3 runs)", 1, 1,
                   1200, h)
        lo = min(min(p[1] for p in pts), 1) / 1.5
        hi = max(max(p[1] for p in pts), 1) * 1.5
        tics = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100) if lo <= t <= hi]
        f.panel(["set logscale x 10", f"set xrange [{lo}:{hi}]",
                 "set xtics (" + ", ".join(f'"{t:g}" {t}' for t in tics) + ")",
                 f"set yrange [{len(grp)}:-1]", "set key off", "set ytics scale 0 font \",8\"", "unset grid",
                 "set grid xtics", 'set xlabel "ours / baseline (throughput)"',
                 "set arrow from 1, graph 0 to 1, graph 1 nohead lc rgb 'black'",
                 "set style fill solid 0.8", "set lmargin 44"],
                [(dat, "(sqrt($2)):1:($2<1?$2:1):($2<1?1:$2):($1-0.38):($1+0.38):"
                       "($3>0?0x999999:($2>=1?0x2ca02c:0xd62728)):yticlabels(4)", "",
                  "with boxxyerror lc rgb variable")])
        figs.append((f, "throughput rows with a baseline: ratio ours / baseline (log scale)"
                     + ("" if name == "overview" else f", {name[9:]}")))
    return figs


def make_plots(rows, directory):
    """Returns ({area: [(name, caption)]}, note)."""
    if not shutil.which("gnuplot"):
        return {}, "gnuplot is not installed (apt-get install gnuplot-nox): no plots"
    os.makedirs(os.path.join(directory, "data"), exist_ok=True)
    out = {}
    notes = []
    for key, fn in (("store", plot_store), ("transfer", plot_transfer), ("rpc", plot_rpc),
                    ("overview", plot_overview)):
        for fig, caption in fn(rows, directory):
            if not fig.panels:
                continue
            script = os.path.join(directory, "data", fig.name + ".gp")
            with open(script, "w") as f:
                f.write(fig.script(directory))
            p = subprocess.run(["gnuplot", script], capture_output=True, text=True)
            if p.returncode != 0 or not os.path.exists(os.path.join(directory, fig.name + ".png")):
                notes.append(f"{fig.name} failed: {p.stderr.strip()[-300:]}")
                print(f"bench_report: gnuplot failed on {script}:\n{p.stderr}", file=sys.stderr)
                continue
            out.setdefault(key, []).append((fig.name, caption))
    return out, "; ".join(notes)


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
