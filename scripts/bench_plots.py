"""Figures of the benchmark report (gnuplot): used by bench_report.py, not run
on its own. Also the row semantics both share: which direction is better, the
ratio to the baseline, when a row is noisy."""
import os
import re
import shutil
import subprocess
import sys

NOISY_SPREAD = 0.20  # (max - min) / median of our runs above this: do not trust the row
MIN_RUNS = 3

def lower_is_better(r):
    u = r.get("unit", "")
    m = r.get("metric", "")
    return u in ("us", "ms", "ns", "ns/op", "s", "calls") or "latency" in m or re.fullmatch(r"p\d+", m) is not None


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



# ------------------------------------------------------------------- plots

SIZE_RE = r"(\d+)(B|KiB|MiB)"


def size_bytes(n, unit):
    return int(n) << {"B": 0, "KiB": 10, "MiB": 20}[unit]


def size_label(b):
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20}MiB"
    if b >= 1 << 10 and b % (1 << 10) == 0:
        return f"{b >> 10}KiB"
    return f"{b}B"


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
        # Paths are relative to the plots directory (gnuplot runs there), so a
        # committed report's scripts name no path outside it.
        s = [f"# run from {os.path.basename(os.path.normpath(directory))}/: gnuplot data/{self.name}.gp",
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


def plot_store(rows, directory, area="store"):
    """Figures of a store_bench area: "store" (the matrix) or "store_curves" (--curves)."""
    cases = by_case(rows, area, r"(tcp|shm)_(get|put)_" + SIZE_RE + r"_c(\d+)")
    if not cases:
        return []
    figs = []
    configs = [c for c in ("tcp", "shm") if any(k[0] == c for k in cases)]
    ops = [o for o in ("put", "get") if any(k[1] == o for k in cases)]
    concs = sorted({int(k[4]) for k in cases})
    sizes = sorted({size_bytes(k[2], k[3]) for k in cases})
    base_name = {"tcp": "redis tcp", "shm": "redis unix socket"}
    # Throughput (MiB/s) vs value size, one line per concurrency, ours solid, Redis dashed.
    f = Figure(f"{area}_throughput", "store: remote get/put throughput vs value size (ours solid, Redis dashed)",
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
                dat = write_dat(directory, f"{area}_thr_{cfg}_{op}_c{c}.dat", ["bytes", "ours_MiBs", "base_MiBs"], pts)
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
    # Throughput (ops/s) vs requests in flight, one line per value size that
    # was measured at several counts (store_bench --curves: 4 KiB, 1..256).
    swept = [s for s in sizes if len({int(k[4]) for k in cases if size_bytes(k[2], k[3]) == s}) > 1]
    if swept:
        f = Figure(f"{area}_throughput_inflight",
                   "store: remote get/put ops/s vs requests in flight (ours solid, Redis dashed)", len(ops), len(configs))
        for op in ops:
            for cfg in configs:
                series, base = [], []
                for i, s in enumerate(swept):
                    pts = sorted((int(k[4]), ms["throughput"]["value"], ms["throughput"].get("baseline_value") or 0)
                                 for k, ms in cases.items()
                                 if k[0] == cfg and k[1] == op and size_bytes(k[2], k[3]) == s and "throughput" in ms)
                    if len(pts) < 2:
                        continue
                    dat = write_dat(directory, f"{area}_ops_{cfg}_{op}_{size_label(s)}.dat",
                                    ["inflight", "ours_ops", "base_ops"], pts)
                    col = COLORS[i % len(COLORS)]
                    series.append((dat, "1:2", f"ours, {size_label(s)}", f"with linespoints lw 2 pt 7 lc rgb '{col}'"))
                    if any(p[2] > 0 for p in pts):
                        base.append((dat, "1:($3>0?$3:1/0)", f"{base_name[cfg]}, {size_label(s)}",
                                     f"with linespoints lw 2 dt 2 pt 6 lc rgb '{col}'"))
                series += base
                f.panel([f'set title "{cfg} {op}"', "set logscale x 2", "set logscale y 10",
                         'set xlabel "requests in flight"', 'set ylabel "ops/s"',
                         "set xtics (" + ", ".join(f'"{c}" {c}' for c in concs) + ")",
                         f"set xrange [{concs[0] / 1.3}:{concs[-1] * 1.3}]"], series)
        figs.append((f, "store: throughput (ops/s) vs requests in flight, ours vs Redis"))
    # Latency percentiles vs concurrency, one figure per value size measured
    # at several counts.
    for s in sizes:
        if s not in swept:
            continue
        name = f"{area}_latency_{size_label(s)}"
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
                dat = write_dat(directory, f"{area}_lat_{cfg}_{op}_{size_label(s)}.dat",
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


def plot_tiered(rows, directory):
    cases = by_case(rows, "tiered", r"offset_allocator_scaling_(\d+)")
    pts = sorted((int(k[0]), ms["latency"]["value"], ms["latency"].get("baseline_value") or 0)
                 for k, ms in cases.items() if "latency" in ms)
    if not pts:
        return []
    dat = write_dat(directory, "tiered_allocator_scaling.dat", ["live", "ours_ns", "map_best_fit_ns"], pts)
    f = Figure("tiered_allocator_scaling", "tiered: OFFSET allocator ns per free+allocate vs live allocations",
               1, 1, 900, 600)
    f.panel(["set logscale x 2", "set logscale y 10", 'set format x "%.0s%c"', 'set xlabel "live allocations"',
             'set ylabel "ns/op"'],
            [(dat, "1:2", "ours (OFFSET, two-level segregated fit)", f"with linespoints lw 2 pt 7 lc rgb '{COLORS[0]}'"),
             (dat, "1:($3>0?$3:1/0)", "std::map/std::set best fit (baseline)",
              f"with linespoints lw 2 dt 2 pt 6 lc rgb '{COLORS[1]}'")])
    return [(f, "tiered: allocator cost per operation from 1 Ki to 10 Mi live allocations, ours vs map best fit")]


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
    for key, fn in (("store", plot_store), ("store_curves", lambda r, d: plot_store(r, d, "store_curves")),
                    ("transfer", plot_transfer), ("rpc", plot_rpc),
                    ("tiered", plot_tiered), ("overview", plot_overview)):
        for fig, caption in fn(rows, directory):
            if not fig.panels:
                continue
            script = os.path.join(directory, "data", fig.name + ".gp")
            with open(script, "w") as f:
                f.write(fig.script(directory))
            p = subprocess.run(["gnuplot", os.path.join("data", fig.name + ".gp")], capture_output=True, text=True,
                               cwd=directory)
            if p.returncode != 0 or not os.path.exists(os.path.join(directory, fig.name + ".png")):
                notes.append(f"{fig.name} failed: {p.stderr.strip()[-300:]}")
                print(f"bench_report: gnuplot failed on {script}:\n{p.stderr}", file=sys.stderr)
                continue
            out.setdefault(key, []).append((fig.name, caption))
    return out, "; ".join(notes)


