#!/usr/bin/env bash
# SIGTERM exits of the node binaries are bounded whatever their peers do:
# a client whose master and data peer are frozen (SIGSTOP) while connections
# to them are open exits by itself (status 0, not the shutdown watchdog)
# within the bound; so does a master with a frozen client connected.
BIN=${1:?usage: shutdown_test.sh BUILD/apps}
source "$(dirname "$0")/lib.sh"
trap cleanup EXIT
cd "$WORK"
command -v curl >/dev/null || { echo "curl missing: skip"; exit 77; }

MRPC=29351 AHTTP=19381 BHTTP=19382
C=(curl -sS --max-time 20)
BOUND=8  # seconds: max(2 s, --rpc_timeout 3 s) plus slack for a loaded machine

spawn master "$BIN/mooncake_master" --rpc_port $MRPC --metrics_port 0
MASTER=$LAST_PID
wait_port 127.0.0.1 $MRPC 20 || exit 1
node() {  # node NAME TE_PORT RPC_PORT HTTP_PORT
  spawn "$1" "$BIN/mooncake_client" --master_server_address 127.0.0.1:$MRPC --host 127.0.0.1 --port "$2" \
    --client_rpc_port "$3" --http_port "$4" --http_host 127.0.0.1 --heartbeat_interval 200ms --rpc_timeout 3000 \
    --tiered_backend_config '{"tiers":[{"type":"DRAM","capacity":"256MiB","priority":100}]}'
}
node a 29352 12645 $AHTTP
A_PID=$LAST_PID
node b 29353 12646 $BHTTP
B_PID=$LAST_PID
check "client A serves" wait_for 20 "${C[@]}" -f "http://127.0.0.1:$AHTTP/health"
check "client B serves" wait_for 20 "${C[@]}" -f "http://127.0.0.1:$BHTTP/health"

# Traffic both ways, so that A holds RPC and transfer connections to B and B to A.
random_file v1 $((3 * 1024 * 1024 + 5))
random_file v2 $((70 * 1024 + 3))
check "put on A" "${C[@]}" -f -X PUT --data-binary @v1 "http://127.0.0.1:$AHTTP/kv/k1" -o /dev/null
check "put on B" "${C[@]}" -f -X PUT --data-binary @v2 "http://127.0.0.1:$BHTTP/kv/k2" -o /dev/null
check "B reads A's value" bash -c "${C[*]} -f http://127.0.0.1:$BHTTP/kv/k1 -o got1 && cmp -s v1 got1"
check "A reads B's value" bash -c "${C[*]} -f http://127.0.0.1:$AHTTP/kv/k2 -o got2 && cmp -s v2 got2"

# exit_within PID SECONDS: the process exits with status 0 within SECONDS.
exit_within() {
  local pid=$1 secs=$2 t0=$SECONDS st
  while kill -0 "$pid" 2>/dev/null && ((SECONDS - t0 <= secs)); do sleep 0.05; done
  if kill -0 "$pid" 2>/dev/null; then echo "  pid $pid still running after ${secs}s" >&2; return 1; fi
  wait "$pid"; st=$?
  echo "  exited with status $st after $((SECONDS - t0))s"
  ((st == 0))
}

kill -STOP "$B_PID" "$MASTER"
kill -TERM "$A_PID"
check "SIGTERM: a client with a frozen master and a frozen peer exits cleanly within ${BOUND}s" \
  exit_within "$A_PID" $BOUND
kill -CONT "$MASTER"
kill -TERM "$MASTER"
check "SIGTERM: the master with a frozen client connected exits cleanly within ${BOUND}s" \
  exit_within "$MASTER" $BOUND
kill -CONT "$B_PID"
kill -TERM "$B_PID"
check "SIGTERM: a client whose master is gone exits cleanly within ${BOUND}s" exit_within "$B_PID" $BOUND
finish
