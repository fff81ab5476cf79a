#!/usr/bin/env bash
# Installs the Debian packages mooncake-p2p needs. Idempotent: does nothing when
# everything is present. Never installs libboost-dev (1.74): it conflicts with
# libboost1.81-dev, and 1.74's asio has no io_uring support.
set -euo pipefail

pkgs=(
  build-essential g++ pkg-config meson ninja-build cmake
  libboost1.81-dev liburing-dev capnproto libcapnp-dev
  doctest-dev libtomlplusplus-dev libibverbs-dev librdmacm-dev
  iproute2 procps
  prometheus curl
)
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(redis-server redis-tools fio gnuplot-nox)
fi
if [[ "${1:-}" == "--rdma" ]]; then
  pkgs+=(qemu-system-x86 busybox-static cpio kmod xz-utils ibverbs-providers rdma-core)
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
