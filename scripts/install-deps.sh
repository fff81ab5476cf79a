#!/usr/bin/env bash
# Installs the Debian packages mooncake-p2p needs. Idempotent: does nothing when
# everything is present. `--bench`: also the benchmark baselines; `--rdma`: also
# what the Soft-RoCE VM runner (scripts/rxe-vm.sh) needs. Never installs libboost-dev (1.74): it conflicts with
# libboost1.81-dev, and 1.74's asio has no io_uring support.
set -euo pipefail

pkgs=(
  build-essential g++ pkg-config meson ninja-build cmake
  libboost1.81-dev libboost-json1.81-dev liburing-dev capnproto libcapnp-dev
  libssl-dev openssl  # TLS towards etcd (lib/master); the openssl CLI makes the test certificates (test/ha)
  doctest-dev libtomlplusplus-dev libibverbs-dev librdmacm-dev
  iproute2 procps
  nftables        # packet loss on the chaos soak's links (scripts/soak.py: no netem here); rates use tc (iproute2)
  gdb             # the chaos soak records the native stacks of a hung workload process (test/soak/worker.py)
  prometheus curl
  pybind11-dev python3-dev python3-pytest  # the Python API (python/) and its tests
  systemd         # systemd-analyze verify of conf/systemd (test/install/systemd_test.sh)
  clang-format    # `make check` verifies the tree is formatted (scripts/check-format.sh)
  clang libclang-rt-14-dev  # the sanitizer build (ASan, UBSan) and its libFuzzer targets (test/fuzz)
  etcd-server etcd-client  # master HA on etcd (test/ha, bench/master/failover_bench.py)
  chromium        # headless browser of test/integration/status_page_test.sh (the master's status page)
)
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(redis-server redis-tools libhiredis-dev fio gnuplot-nox libmimalloc2.0 libjemalloc2)  # allocators: bench/store/allocator_swap.py
fi
if [[ "${1:-}" == "--rdma" ]]; then
  # scripts/rxe-vm.sh (the Soft-RoCE VM of `make test-rdma`): qemu boots Debian's
  # own kernel (downloaded with `apt-get download` on first use) from a busybox
  # initramfs built with cpio/gzip; kmod's depmod indexes its modules; the
  # guest runs `rdma` (iproute2) and the host's librxe provider (ibverbs-providers).
  pkgs+=(qemu-system-x86 qemu-system-data busybox-static cpio gzip kmod xz-utils iproute2 ibverbs-providers)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if dpkg-query -W -f='${Status}' libboost-dev 2>/dev/null | grep -q "install ok installed"; then
  echo "install-deps: libboost-dev (1.74) is installed and conflicts with libboost1.81-dev; remove it" >&2
  exit 1
fi
