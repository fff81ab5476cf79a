#!/usr/bin/env bash
# One fuzz target's check in `make test` (suite fuzz), deterministic:
#   1. replays every committed input (corpus/NAME, regressions/NAME) one by one;
#   2. explores from that corpus with a fixed seed and a fixed number of runs.
# New inputs from step 2 go to a scratch directory (the committed corpus is
# never written); a crashing input is kept under BUILD_DIR/artifacts/NAME/.
#   run-fuzz.sh EXE NAME SOURCE_DIR BUILD_DIR RUNS MAX_LEN
set -euo pipefail
exe=$1 name=$2 src=$3 build=$4 runs=$5 max_len=$6
corpus=$src/corpus/$name regress=$src/regressions/$name
artifacts=$build/artifacts/$name
mkdir -p "$artifacts"
scratch=$(mktemp -d) logs=$(mktemp -d)  # new inputs / logs (never in the corpus libFuzzer reads)
trap 'rm -rf "$scratch" "$logs"' EXIT
dict=()
[[ -f $src/dict/$name.dict ]] && dict=(-dict="$src/dict/$name.dict")
# -error_exitcode=1: libFuzzer's default (77) reads as "skipped" to meson.
# -entropic=0: with every library instrumented, entropic scheduling spends
# most of the time on its bookkeeping (5-20x fewer executions).
common=(-rss_limit_mb=4096 -timeout=30 -error_exitcode=1 -entropic=0 -artifact_prefix="$artifacts/" "${dict[@]}")

inputs=()
for d in "$corpus" "$regress"; do
  [[ -d $d ]] || continue
  while IFS= read -r -d '' f; do inputs+=("$f"); done < <(find "$d" -type f -print0 | sort -z)
done
((${#inputs[@]})) || { echo "run-fuzz: $name has no seed corpus in $corpus" >&2; exit 1; }
echo "run-fuzz: $name: replaying ${#inputs[@]} committed inputs"
# Given files (not directories), libFuzzer runs each once and exits.
printf '%s\0' "${inputs[@]}" | xargs -0 -n 256 "$exe" "${common[@]}" >"$logs/replay.log" 2>&1 || {
  cat "$logs/replay.log" >&2; echo "run-fuzz: $name: a committed input fails" >&2; exit 1; }

echo "run-fuzz: $name: exploring, seed 1, $runs runs, inputs up to $max_len bytes"
dirs=("$scratch" "$corpus")
[[ -d $regress ]] && dirs+=("$regress")
if "$exe" "${common[@]}" -seed=1 -runs="$runs" -max_len="$max_len" -print_final_stats=1 "${dirs[@]}" \
  >"$logs/explore.log" 2>&1; then
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::' "$logs/explore.log" || tail -n 5 "$logs/explore.log"
else
  rc=$?
  cat "$logs/explore.log" >&2
  echo "run-fuzz: $name: exploration failed (exit $rc); the input is under $artifacts" >&2
  # The failing inputs in base64 too: a CI log is often all there is to
  # reproduce from (exploration depends on timing through the coverage of
  # background threads, so the same seed need not find it again).
  for f in "$artifacts"/*; do
    [[ -f $f ]] || continue
    echo "run-fuzz: $name: $(basename "$f") (base64): $(head -c 65536 "$f" | base64 -w0)" >&2
  done
  exit "$rc"
fi
