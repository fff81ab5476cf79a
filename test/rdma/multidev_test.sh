#!/usr/bin/env bash
# Runs rdma_multidev_test with a second Soft-RoCE device (inside the VM).
# Creates mcdummy1 + rxe1 and removes them afterwards, also on failure.
# Usage: multidev_test.sh BINARY [doctest args...]. Exit 77 outside the VM.
set -u
bin=${1:?usage: multidev_test.sh BINARY [args...]}
shift
if [[ -z "${RXE_VM_DEV:-}" ]]; then
  echo "multidev_test: RXE_VM_DEV is unset (not inside the Soft-RoCE VM): skipped"
  exit 77
fi
cleanup() {
  rdma link delete rxe1 2>/dev/null
  ip link del mcdummy1 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup  # leftovers of an interrupted run
ip link add mcdummy1 type dummy &&
  ip addr add 10.77.1.1/24 dev mcdummy1 &&
  ip link set mcdummy1 up &&
  rdma link add rxe1 type rxe netdev mcdummy1 || {
  echo "multidev_test: cannot create rxe1 on mcdummy1"
  exit 1
}
# The port becomes ACTIVE and the RoCE v2 GID appears asynchronously: wait
# (bounded) for both instead of sleeping a fixed time.
gid=${RXE_VM_GID_INDEX:-1}
for _ in $(seq 1 100); do
  state=$(cat /sys/class/infiniband/rxe1/ports/1/state 2>/dev/null)
  g=$(cat /sys/class/infiniband/rxe1/ports/1/gids/"$gid" 2>/dev/null)
  [[ "$state" == *ACTIVE* && -n "$g" && "$g" != 0000:0000:0000:0000:0000:0000:0000:0000 ]] && break
  sleep 0.1  # sysfs offers no event for this; bounded to 10 s
done
echo "multidev_test: rxe1 state='${state:-?}' gid[$gid]='${g:-?}'"
RXE_VM_DEV2=rxe1 "$bin" "$@"
