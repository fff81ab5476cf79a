#!/usr/bin/env bash
# `make fuzz [SECONDS=N]`: runs every libFuzzer target of BUILD (suite fuzz)
# for N seconds each, one after the other, from a working corpus
# BUILD/fuzz-work/NAME that starts as a copy of test/fuzz/corpus/NAME and
# keeps what each run finds (later runs continue from it). Crashing inputs go
# to BUILD/fuzz-work/artifacts/; copy each into test/fuzz/regressions/NAME/
# once fixed, and add the corpus entries worth keeping (`-merge=1`, README
# "Fuzzing"). Prints a table: executions, coverage, corpus size, result.
#   bash scripts/fuzz.sh BUILD SECONDS
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build=${1:?usage: fuzz.sh BUILD SECONDS} secs=${2:-60}
work=$build/fuzz-work
mkdir -p "$work/artifacts"
mapfile -t names < <(meson introspect "$build" --tests |
  python3 -c 'import json,sys; [print(t["name"][5:]) for t in json.load(sys.stdin) if "mooncake-p2p:fuzz" in t["suite"] or "fuzz" in t["suite"]]')
((${#names[@]})) || { echo "fuzz: no fuzz targets in $build (configure it with clang and -Dfuzz=enabled)" >&2; exit 1; }
failed=0
rows=()
for name in "${names[@]}"; do
  exe=$build/test/fuzz/${name}_fuzz
  mkdir -p "$work/$name"
  cp -rn test/fuzz/corpus/"$name"/. "$work/$name"/ 2>/dev/null
  dict=()
  [[ -f test/fuzz/dict/$name.dict ]] && dict=(-dict="test/fuzz/dict/$name.dict")
  echo "== fuzz: $name for ${secs}s"
  log=$work/$name.log
  "$exe" -max_total_time="$secs" -rss_limit_mb=4096 -timeout=30 -error_exitcode=1 -entropic=0 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$name-" "${dict[@]}" "$work/$name" >"$log" 2>&1
  rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$done_line")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$done_line")
  res=ok
  if ((rc != 0)); then res="FAILED (exit $rc, see $log)"; failed=1; tail -n 40 "$log"; fi
  rows+=("$(printf '%-22s %10s %7s %7s %7s  %s' "$name" "${execs:-?}" "${cov:-?}" "${ft:-?}" \
    "$(find "$work/$name" -type f | wc -l)" "$res")")
done
printf '\n%-22s %10s %7s %7s %7s  %s\n' target executions cov ft corpus result
printf '%s\n' "${rows[@]}"
exit "$failed"
