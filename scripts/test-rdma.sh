#!/usr/bin/env bash
# Runs the meson suite `rdma` once inside a Soft-RoCE VM (../shared/rxe).
set -uo pipefail
build=${1:-build}
if ! meson test -C "$build" --list 2>/dev/null | grep -q ':rdma'; then
  echo "test-rdma: no test in suite 'rdma' yet (the verbs transport, issue 8, has not landed); skipped"
  exit 0
fi
echo "test-rdma: suite present but not wired yet" >&2
exit 1
