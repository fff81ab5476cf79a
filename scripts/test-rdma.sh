#!/usr/bin/env bash
# `make test-rdma`: runs the meson suite `rdma` once inside ONE Soft-RoCE VM
# (scripts/rxe-vm.sh, this repository's runner).
#   bash scripts/test-rdma.sh [BUILD_DIR]     (default: build)
# Installs the VM's Debian packages when missing (install-deps.sh --rdma) and
# fills the kernel cache on first use (needs Debian's package mirror once).
# Exit 0 with a "SKIPPED" line only when the build has no rdma suite (built
# without libibverbs) or the VM cannot boot here at all (no packages and no way
# to install them, no kernel package, no 9p/virtio); non-zero when the VM ran
# and a test failed, or the run timed out.
# Env: RDMA_VM_TIMEOUT (seconds inside the VM, default 900).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
build=${1:-build}
[[ $build = /* ]] || build=$root/$build
vm=$root/scripts/rxe-vm.sh
vm_timeout=${RDMA_VM_TIMEOUT:-900}

skip() { echo "test-rdma: SKIPPED: $*"; exit 0; }

list=$(meson test -C "$build" --list 2>/dev/null) || { echo "test-rdma: no build in $build" >&2; exit 1; }
grep -q ':rdma / ' <<<"$list" || skip "no test in suite 'rdma' (built without libibverbs)"
# Build what the suite needs on the host; the VM only runs it (--no-rebuild).
ninja -C "$build" >/dev/null || { echo "test-rdma: build failed" >&2; exit 1; }

bash scripts/install-deps.sh --rdma ||
  skip "cannot install the VM's packages (install-deps.sh --rdma; needs root and a Debian mirror)"
t0=$SECONDS
bash "$vm" --prepare || skip "the VM's kernel cache could not be prepared (first use needs Debian's mirror)"
((SECONDS - t0 > 2)) && echo "test-rdma: VM kernel cache prepared in $((SECONDS - t0)) s"

marker=$build/meson-logs/rdma-vm.started
mkdir -p "$build/meson-logs"
rm -f "$marker"
echo "test-rdma: booting the Soft-RoCE VM (timeout ${vm_timeout}s) for suite 'rdma'"
bash "$vm" -t "$vm_timeout" -- bash -c '
  touch "$1"
  echo "test-rdma: in the VM: RXE_VM_DEV=$RXE_VM_DEV RXE_VM_GID_INDEX=$RXE_VM_GID_INDEX"
  exec meson test -C "$2" --suite rdma --no-rebuild --print-errorlogs' _ "$marker" "$build"
rc=$?
if [[ ! -e $marker ]]; then
  # The command never started: the VM could not boot (status 125) here.
  ((rc == 125)) && skip "the Soft-RoCE VM could not boot here (scripts/rxe-vm.sh exit status 125; see above)"
  echo "test-rdma: FAILED: the VM runner exited with status $rc before the suite started" >&2
  exit "$rc"
fi
rm -f "$marker"
case $rc in
  0) echo "test-rdma: suite 'rdma' passed inside the VM" ;;
  124) echo "test-rdma: FAILED: the VM run timed out after ${vm_timeout}s" >&2 ;;
  125) echo "test-rdma: FAILED: the VM died before reporting a status" >&2 ;;
  *) echo "test-rdma: FAILED: suite 'rdma' failed inside the VM (exit $rc)" >&2 ;;
esac
exit "$rc"
