#!/usr/bin/env bash
# `make run`: starts a local cluster from conf/ (one master, two clients).
set -euo pipefail
build=${1:-build}
if [[ ! -x "$build/apps/mooncake_master" || ! -x "$build/apps/mooncake_client" ]]; then
  echo "make run: the node binaries (mooncake_master, mooncake_client) are not built yet;" >&2
  echo "          the P2P store (issue 6) has not landed. Nothing to run." >&2
  exit 1
fi
exec bash scripts/cluster.sh "$build"
