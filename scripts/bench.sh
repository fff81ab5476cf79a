#!/usr/bin/env bash
# `make bench [QUICK=1]`: installs the benchmark dependencies, builds an
# optimised build, runs every benchmark program under bench/ with a progress
# display and writes bench/results/<date>-<short commit>[-quick]/:
#   results.jsonl   machine description, every JSON result line, one line per program run
#   report.md       tables per area (ours, baseline, ratio, spread), summary
#   plots/          PNG + SVG (throughput vs value size, latency vs concurrency, ratios)
#   logs/           each program's full output (human table, stderr)
# Environment:
#   QUICK=1          reduced matrix (< 3 minutes of benchmarks)
#   BENCH_BUILD      build directory (default build-release, --buildtype=release)
#   BENCH_ONLY       comma list of areas to run: runtime,rpc,transfer,tiered,store,inference,python
#   BENCH_OUT        output directory (default bench/results/<date>-<commit>[-quick])
#   JOBS             build parallelism (default nproc)
#   BENCH_NO_BUILD=1 do not (re)build: run the programs already in BENCH_BUILD
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

quick=${QUICK:-0}
[[ $quick == "" || $quick == 0 ]] && quick=0 || quick=1
build=${BENCH_BUILD:-build-release}
build_abs=$(realpath -m "$build")
jobs=${JOBS:-$(nproc)}
only=${BENCH_ONLY:-}
t_start=$SECONDS

say() { printf '\033[1m== %s\033[0m\n' "$*"; }
fmt_time() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# ---- 1. dependencies (Debian packages: redis-server, redis-tools, libhiredis-dev, fio, gnuplot-nox)
say "dependencies"
bash scripts/install-deps.sh --bench

# ---- 2. optimised build (its own directory; tests are not needed here)
say "optimised build in $build"
if [[ -n ${BENCH_NO_BUILD:-} ]]; then
  echo "BENCH_NO_BUILD set: using the programs already in $build"
elif [[ ! -f $build/build.ninja ]]; then
  meson setup "$build" --buildtype=release -Dtests=false -Dbench=true >/dev/null
fi
# inference_bench needs libhiredis (optional in meson): a build directory
# configured before it was installed does not know it yet.
if [[ -z ${BENCH_NO_BUILD:-} && -f $build/build.ninja ]] && pkg-config --exists hiredis &&
  ! grep -q inference_bench "$build/build.ninja"; then
  meson setup --reconfigure "$build" >/dev/null
fi
if [[ -z ${BENCH_NO_BUILD:-} ]]; then
  build_log=$(mktemp /tmp/mc-bench-build.XXXXXX)
  if ! meson compile -C "$build" -j "$jobs" >"$build_log" 2>&1; then
    tail -n 40 "$build_log"
    echo "bench: the build failed (full log: $build_log)" >&2
    exit 1
  fi
  rm -f "$build_log"
fi

# ---- 3. output directory
short=$(git rev-parse --short HEAD 2>/dev/null || echo nogit)
suffix=$([[ $quick == 1 ]] && echo "-quick" || true)
out=${BENCH_OUT:-bench/results/$(date +%Y-%m-%d)-$short$suffix}
rm -rf "$out"
mkdir -p "$out/logs" "$out/plots"
out=$(cd "$out" && pwd)
results=$out/results.jsonl
python3 scripts/bench_report.py machine --quick "$quick" --build "$build" >"$results"

# ---- 4. the matrix: area, program, arguments, expected number of result lines
count() { local IFS=,; set -- $1; echo $#; }  # items of a comma list
areas=() programs=() argv=() expected=()
add() { areas+=("$1"); programs+=("$2"); argv+=("$3"); expected+=("$4"); }
if [[ $quick == 1 ]]; then
  limit=240
  inflight=1,16,64
  add runtime runtime/runtime_bench "--runs 3 --file-mib 64" 7
  add rpc rpc/rpc_bench "--runs 3 --duration-ms 200 --inflight $inflight" $((9 * $(count $inflight)))
  sizes=64K,256K,1M,4M,16M
  add transfer transfer/transfer_bench "--runs 3 --seconds 0.05 --sizes $sizes --batch 16 --threads 1" \
    $((4 * $(count $sizes)))
  # the same-host rows again with 4 KiB pages (cases *_4kpages; lib/transfer/README.md "Huge pages")
  add transfer transfer/transfer_bench "--runs 3 --seconds 0.05 --transports shm --sizes 1M,16M --batch 16 --threads 1 --small-pages" 4
  add tiered tiered/tier_bench "--runs 2 --mib 64 --scaling-max 262144" 11
  ssizes=4096,65536,1048576 conc=1,8
  for cfg in tcp shm; do  # no cost rows here (the full run has them)
    add store store/store_bench "--configs $cfg --runs 3 --seconds 0.15 --sizes $ssizes --concurrency $conc --no-cost" \
      $((6 * $(count $ssizes) * $(count $conc)))  # put/get x (ops/s, p50, p99)
  done
  add store store/ssd_batch_bench "--runs 3 --keys 16" 1
  for cfg in tcp shm; do  # 3 connector shapes x put/get x 2 baselines + 2 small batches + 2 x 3 single-get rows
    add inference inference/inference_bench "--quick --configs $cfg" 20
  done
  add python python/python_bench.py "--quick --cases vllm" 2  # Python API vs C++ API, the multi-buffer case, put/get
  add master master/master_bench "--keys 1000000 --clients 1000 --runs 3" 7
  add master master/failover_bench.py "--kills 2" 1
else
  limit=900
  inflight=1,4,16,64,256
  add runtime runtime/runtime_bench "--runs 5" 7
  add rpc rpc/rpc_bench "--runs 5 --inflight $inflight" $((9 * $(count $inflight)))
  sizes=4K,64K,1M,16M batch=1,16,128 threads=1,2
  add transfer transfer/transfer_bench \
    "--runs 3 --sizes $sizes --batch $batch --threads $threads --big-batch-mib 0" \
    $((4 * $(count $sizes) * $(count $batch) * $(count $threads)))
  add transfer transfer/transfer_bench \
    "--runs 3 --transports shm --sizes 1M,16M --batch 16 --threads $threads --small-pages" $((2 * 2 * $(count $threads)))
  add tiered tiered/tier_bench "--runs 3" 13
  ssizes=4096,65536,1048576  # (4 MiB and up: the size curves below)
  for cfg in tcp shm; do
    add store store/store_bench "--configs $cfg --runs 3 --full --sizes $ssizes" $((10 * $(count $ssizes) * 3))
  done
  for cfg in tcp shm; do  # get curves: 4 KiB at 1..256 in flight, 512 B..64 MiB at 8 in flight
    add store store/store_bench "--configs $cfg --runs 3 --curves" $((3 * (8 + 7)))
  done
  add store store/ssd_batch_bench "--runs 5 --keys 32" 1
  for cfg in tcp shm; do
    add inference inference/inference_bench "--configs $cfg --runs 3" 20
  done
  # the same-host big shapes again with caller buffers in 4 KiB pages (*_4kpages, no targets)
  add inference inference/inference_bench "--configs shm --cases sglang,vllm,lmcache --runs 3 --small-pages" 12
  add python python/python_bench.py "" 6
  add master master/master_bench "--keys 10000000 --clients 1000 --runs 3" 7
  add master master/failover_bench.py "--kills 10" 1
fi

sel=()
for i in "${!areas[@]}"; do
  if [[ -z $only || ",$only," == *",${areas[$i]},"* ]]; then sel+=("$i"); fi
done
total_expected=0
for i in "${sel[@]}"; do total_expected=$((total_expected + expected[i])); done

# ---- 5. run with a progress display
tty=0
[[ -t 1 ]] && tty=1
total_done=0
failures=()

# Ctrl-C / TERM: stop the running program too (it runs in the background of a subshell).
on_signal() {
  [[ -n ${out:-} && -s $out/logs/.pid ]] && kill -TERM "$(cat "$out/logs/.pid")" 2>/dev/null
  echo; echo "bench: interrupted" >&2
  exit 130
}
trap on_signal INT TERM

status() {  # one status line: program, results done/left, last case, times
  local step=$1 name=$2 n=$3 exp=$4 last=$5 t0=$6
  local el=$((SECONDS - t0)) left=$((exp - n))
  ((left < 0)) && left=0
  local eta="?"
  ((n > 0)) && eta="~$(fmt_time $((el * left / n)))"
  local s
  s=$(printf '[%d/%d %s] result %d/%d (%d left, %d/%d overall) | last: %s | %s elapsed, ETA %s | total %s' \
    "$step" "${#sel[@]}" "$name" "$n" "$exp" "$left" "$((total_done + n))" "$total_expected" \
    "${last:-start}" "$(fmt_time "$el")" "$eta" "$(fmt_time $((SECONDS - t_start)))")
  if ((tty)); then
    printf '\r\033[K%s' "${s:0:$(($(tput cols 2>/dev/null || echo 160) - 1))}"
  else
    printf '%s\n' "$s"
  fi
}

run_step() {  # step index
  local i=$1 step=$2
  local area=${areas[$i]} prog=$build_abs/bench/${programs[$i]} args=${argv[$i]} exp=${expected[$i]}
  local name=${prog##*/}
  local log=$out/logs/$step-$name.log err=$out/logs/$step-$name.err pidf=$out/logs/.pid
  local t0=$SECONDS n=0 last="" line buf="" rc=0 tick=$SECONDS
  say "$name $args"
  rm -f "$pidf"
  if [[ ! -x $prog ]]; then  # an optional program the build left out (e.g. no libhiredis)
    failures+=("$name: not built (missing optional dependency? scripts/install-deps.sh --bench)")
    printf '{"type":"program","area":"%s","program":"%s","args":"%s","exit":127,"seconds":0,"results":0,"expected":%d,"log":"logs/%s"}\n' \
      "$area" "$name" "$args" "$exp" "$step-$name.log" >>"$results"
    echo "  !! $name: not built" >&2
    return
  fi
  # shellcheck disable=SC2086
  exec {fd}< <(
    timeout --foreground -k 10 "$limit" "$prog" $args 2>"$err" &
    echo $! >"$pidf"
    st=0
    wait $! || st=$?
    echo "__rc $st"
  )
  ((tty)) && status "$step" "$name" 0 "$exp" "" "$t0"
  while :; do
    if IFS= read -r -t 1 -u "$fd" line; then
      line=$buf$line
      buf=""
      if [[ $line == "__rc "* ]]; then
        rc=${line#__rc }
        break
      fi
      printf '%s\n' "$line" >>"$log"
      if [[ $line == "{"* ]]; then
        printf '%s\n' "$line" >>"$results"
        n=$((n + 1))
        local c="" m=""
        [[ $line =~ \"case\":\"([^\"]*)\" ]] && c=${BASH_REMATCH[1]}
        [[ $line =~ \"metric\":\"([^\"]*)\" ]] && m=${BASH_REMATCH[1]}
        last="$c $m"
      elif [[ -n $line && $line != "#"* && $line != "case "* ]]; then
        ((tty)) && printf '\r\033[K'
        printf '  %3d/%-3d %s\n' "$((n + 1))" "$exp" "$line"
      fi
      if ((tty)); then
        status "$step" "$name" "$n" "$exp" "$last" "$t0"
      elif ((SECONDS - tick >= 20)); then
        tick=$SECONDS
        status "$step" "$name" "$n" "$exp" "$last" "$t0"
      fi
    else
      local st=$?
      if ((st > 128)); then  # timed out: keep the partial line, refresh the clock
        buf+=$line
        if ((tty)); then
          status "$step" "$name" "$n" "$exp" "$last" "$t0"
        elif ((SECONDS - tick >= 20)); then
          tick=$SECONDS
          status "$step" "$name" "$n" "$exp" "$last" "$t0"
        fi
      else
        rc=255  # EOF without the exit status line
        break
      fi
    fi
  done
  exec {fd}<&-
  ((tty)) && printf '\r\033[K'
  local secs=$((SECONDS - t0))
  total_done=$((total_done + n))
  printf '{"type":"program","area":"%s","program":"%s","args":"%s","exit":%d,"seconds":%d,"results":%d,"expected":%d,"log":"logs/%s"}\n' \
    "$area" "$name" "$args" "$rc" "$secs" "$n" "$exp" "$step-$name.log" >>"$results"
  if [[ $rc != 0 ]]; then
    local why="exit status $rc"
    [[ $rc == 124 ]] && why="timed out after ${limit}s"
    failures+=("$name: $why (see $err)")
    echo "  !! $name: $why; stderr:" >&2
    tail -n 5 "$err" | sed 's/^/     /' >&2
  fi
  rm -f "$pidf"
  printf '  %s: %d results in %s\n' "$name" "$n" "$(fmt_time "$secs")"
}

t_bench=$SECONDS
step=0
for i in "${sel[@]}"; do
  step=$((step + 1))
  run_step "$i" "$step"
done
bench_secs=$((SECONDS - t_bench))
python3 scripts/bench_report.py end --seconds "$bench_secs" >>"$results"

# ---- 6. report and plots
say "report"
python3 scripts/bench_report.py report "$out"
echo
sed -n '/^## Summary/,/^## /p' "$out/report.md" | sed '$d'
echo "benchmarks took $(fmt_time "$bench_secs"), everything $(fmt_time $((SECONDS - t_start)))"
echo "report: $out/report.md  plots: $out/plots/"
if ((${#failures[@]})); then
  printf 'bench: FAILED: %s\n' "${failures[@]}" >&2
  exit 1
fi
