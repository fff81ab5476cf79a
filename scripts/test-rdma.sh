#!/usr/bin/env bash
# Runs the meson suite `rdma` once inside ONE Soft-RoCE VM
# (../shared/rxe/run-in-rxe-vm.sh, relative to the repository).
#   bash scripts/test-rdma.sh [BUILD_DIR]     (default: build)
# Exit 0 with a "SKIPPED" line when the VM cannot start here (no script, no
# qemu and no way to install it, no network for the kernel package, ...);
# non-zero when the VM ran and a test failed or the run timed out.
# Env: RDMA_VM_TIMEOUT (seconds inside the VM, default 900),
#      RDMA_TOTAL_TIMEOUT (whole step incl. first-time setup, default 1000).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
build=${1:-build}
[[ $build = /* ]] || build=$root/$build
vm=$root/../shared/rxe/run-in-rxe-vm.sh
vm_timeout=${RDMA_VM_TIMEOUT:-900}
total_timeout=${RDMA_TOTAL_TIMEOUT:-1000}

skip() { echo "test-rdma: SKIPPED: $*"; exit 0; }

list=$(meson test -C "$build" --list 2>/dev/null) || { echo "test-rdma: no build in $build" >&2; exit 1; }
grep -q ':rdma / ' <<<"$list" || skip "no test in suite 'rdma' (built without libibverbs)"
[[ -f $vm ]] || skip "$vm not found (the Soft-RoCE VM runner)"
# Build what the suite needs on the host; the VM only runs it (--no-rebuild).
ninja -C "$build" >/dev/null ||
  { echo "test-rdma: build failed" >&2; exit 1; }

marker=$build/meson-logs/rdma-vm.started
mkdir -p "$build/meson-logs"
rm -f "$marker"
echo "test-rdma: booting the Soft-RoCE VM (timeout ${vm_timeout}s) for suite 'rdma'"
timeout -k 10 "$total_timeout" bash "$vm" -t "$vm_timeout" -- bash -c '
  touch "$1"
  echo "test-rdma: in the VM: RXE_VM_DEV=$RXE_VM_DEV RXE_VM_GID_INDEX=$RXE_VM_GID_INDEX"
  exec meson test -C "$2" --suite rdma --no-rebuild --print-errorlogs' _ "$marker" "$build"
rc=$?
if [[ ! -e $marker ]]; then
  skip "the Soft-RoCE VM could not start here (runner exit status $rc; needs qemu-system-x86, busybox-static, cpio, kmod, xz-utils, ibverbs-providers and, on first use, network access for Debian's kernel package)"
fi
rm -f "$marker"
case $rc in
  0) echo "test-rdma: suite 'rdma' passed inside the VM" ;;
  124 | 137) echo "test-rdma: FAILED: the VM run timed out" >&2 ;;
  125) echo "test-rdma: FAILED: the VM died before reporting a status" >&2 ;;
  *) echo "test-rdma: FAILED: suite 'rdma' failed inside the VM (exit $rc)" >&2 ;;
esac
exit "$rc"
