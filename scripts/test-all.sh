#!/usr/bin/env bash
# `make test`: runs each stage (a make target) in order, prints its wall time
# as it ends and a summary table at the end. Every stage runs even when an
# earlier one failed (the table shows them all); exit status 1 if any failed.
#   bash scripts/test-all.sh STAGE...      e.g. check test-asan test-tsan test-release test-rdma
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
(($#)) || { echo "usage: $0 STAGE..." >&2; exit 2; }

fmt() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
names=() times=() results=()
t_all=$SECONDS
start_epoch=$EPOCHSECONDS
for stage in "$@"; do
  printf '\n\033[1m== make test: stage %s\033[0m\n' "$stage"
  t0=$SECONDS
  make --no-print-directory "$stage"
  rc=$?
  secs=$((SECONDS - t0))
  res=passed
  ((rc == 0)) || res="FAILED (exit $rc)"
  printf '\033[1m== make test: stage %s %s in %s\033[0m\n' "$stage" "$res" "$(fmt "$secs")"
  names+=("$stage") times+=("$secs") results+=("$res")
done

failed=0
printf '\n== make test summary\n%-14s %8s  %s\n' stage time result
for i in "${!names[@]}"; do
  printf '%-14s %8s  %s\n' "${names[i]}" "$(fmt "${times[i]}")" "${results[i]}"
  [[ ${results[i]} == passed ]] || failed=1
done
printf '%-14s %8s  %s\n' total "$(fmt $((SECONDS - t_all)))" "$( ((failed)) && echo FAILED || echo passed)"
# A CI log is often read from its end: the failed tests' own output, again.
((failed)) && python3 scripts/failed-test-logs.py "$start_epoch"
exit "$failed"
