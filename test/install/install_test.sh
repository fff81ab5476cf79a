#!/usr/bin/env bash
# The installed tree works like a C++ library's: `meson install --destdir` from
# the build under test, then a small program (main.cpp, copied to a temp dir
# outside the source tree) is built with ONLY `pkg-config --cflags --libs
# mooncake-p2p` (PKG_CONFIG_PATH + PKG_CONFIG_SYSROOT_DIR point into the
# installed tree) and run against a master and a client node started from the
# INSTALLED binaries with the INSTALLED example configs: a remote write onto
# the node and a local put, each read back and compared.
#
#   install_test.sh BUILD_DIR SOURCE_DIR/test/install
BUILD=${1:?usage: install_test.sh BUILD_DIR TEST_SOURCE_DIR}
SRC=${2:?usage: install_test.sh BUILD_DIR TEST_SOURCE_DIR}
CXX=${CXX:-c++}
BIN=$(cd "$BUILD/apps" && pwd)  # lib.sh wants BIN; reset below to the installed one
source "$SRC/../integration/lib.sh"
trap cleanup EXIT
DEST=$WORK/root
t0=$SECONDS

check "meson install --destdir succeeds" bash -c "meson install -C '$BUILD' --no-rebuild --quiet --destdir '$DEST' >'$WORK/install.log' 2>&1"
pc=$(find "$DEST" -name mooncake-p2p.pc | head -1)
check "mooncake-p2p.pc is installed" test -n "$pc"
[[ -n "$pc" ]] || exit 1
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$DEST
INST_BIN=$(dirname "$(find "$DEST" -name mooncake_master -type f | head -1)")
ETC=$(dirname "$(find "$DEST" -path '*/mooncake/master.toml' | head -1)")
for b in mooncake_master mooncake_client mooncake_cli; do
  check "$b is installed and executable" test -x "$INST_BIN/$b"
done
check "no test, benchmark or example binary is installed" \
  bash -c "! find '$DEST' -type f \( -name '*_unit' -o -name '*_test' -o -name '*_bench' -o -name '*example*' \) | grep -q ."
check "Cflags carry -std=c++20 and the Boost.Asio defines" bash -c "
  f=\$(pkg-config --cflags mooncake-p2p) && for d in -std=c++20 -DBOOST_ASIO_SEPARATE_COMPILATION \
    -DBOOST_ASIO_NO_DEPRECATED -DBOOST_ASIO_NO_TS_EXECUTORS; do [[ \" \$f \" == *\" \$d \"* ]] || exit 1; done"

# Build outside the source tree with only pkg-config.
mkdir -p "$WORK/app"
cp "$SRC/main.cpp" "$WORK/app/main.cpp"
c0=$SECONDS
(cd "$WORK/app" && $CXX -O1 -o install_smoke main.cpp $(pkg-config --cflags --libs mooncake-p2p)) >"$WORK/compile.log" 2>&1
check "a program builds against the installed tree with only pkg-config ($((SECONDS - c0)) s)" test -x "$WORK/app/install_smoke"
[[ -x "$WORK/app/install_smoke" ]] || { cat "$WORK/compile.log" >&2; exit 1; }

# A local cluster from the installed binaries and configs (flags override the
# files' ports so it does not clash with a running `make run`). Every port is
# below the kernel's ephemeral range (32768-60999): a test running beside
# this one cannot hold it as the source port of an outgoing connection.
MRPC=21151 TE=21152 RPC=12445 HTTP=19445
spawn master "$INST_BIN/mooncake_master" --config "$ETC/master.toml" --rpc_address 127.0.0.1 --rpc_port $MRPC \
  --metrics_port 0
spawn node "$INST_BIN/mooncake_client" --config "$ETC/client.toml" --master_server_address 127.0.0.1:$MRPC \
  --host 127.0.0.1 --port $TE --client_rpc_port $RPC --http_host 127.0.0.1 --http_port $HTTP --heartbeat_interval 200ms \
  --tiered_backend_config '{"tiers":[{"type":"DRAM","capacity":"64MiB","priority":100}]}'
# The readiness check of the systemd units (conf/systemd): poll /health.
check "the installed node answers /health (the units' readiness poll)" curl --silent --show-error --fail --output /dev/null \
  --retry 30 --retry-delay 1 --retry-connrefused --retry-max-time 30 --max-time 2 "http://127.0.0.1:$HTTP/health"
check "the node registered with the installed master" wait_for 10 bash -c \
  "'$INST_BIN/mooncake_cli' --master_server_address 127.0.0.1:$MRPC clients | grep -q healthy"
check "the pkg-config-built program puts, gets back and compares through the cluster" \
  timeout 60 "$WORK/app/install_smoke" --master_server_address 127.0.0.1:$MRPC --target 127.0.0.1:$RPC
if ((FAILS > 0)); then  # name the cause in the test log (the work dir is removed at exit)
  for n in master node; do
    echo "--- last lines of the installed $n's log:" >&2
    tail -n 20 "$WORK/$n.log" >&2
  done
fi
# The Python package (when the build has it): installed into the interpreter's
# dist-packages under the prefix, without the `mooncake` shim by default.
PYSITE=$(find "$DEST" -type d -path '*/dist-packages' | head -1)
if [[ -n "${PYTHON:-}" ]]; then
  check "mooncake_p2p is installed into <prefix>/lib/python3/dist-packages" test -f "$PYSITE/mooncake_p2p/__init__.py"
  check "the mooncake shim is not installed unless asked for" test ! -e "$PYSITE/mooncake"
  check "the installed mooncake_p2p puts and gets through the installed cluster" env PYTHONPATH="$PYSITE" \
    timeout 60 "$PYTHON" -c "
import mooncake_p2p as m
assert m.__version__
s = m.MooncakeDistributedStore()
assert s.setup('127.0.0.1', 'P2PHANDSHAKE', 16 << 20, 16 << 20, 'tcp', '', '127.0.0.1:$MRPC') == 0
assert s.put('installed-python', b'x' * 1000) == 0 and s.get('installed-python') == b'x' * 1000
assert s.close() == 0"
fi
echo "install test: $((SECONDS - t0)) s"
finish
