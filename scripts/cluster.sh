#!/usr/bin/env bash
# Starts a local P2P cluster from conf/: one master and two clients, shows a
# cross-node put and get with mooncake_cli, then keeps serving until Ctrl-C
# and stops every process it started (and nothing else).
# HA=1 (`make run HA=1`): an etcd (client port 23790, data in the run
# directory) and two masters with --ha_backend etcd (RPC 50051 and 50061,
# HTTP 9003 and 9013); the clients and the CLI follow the leader through
# etcd://127.0.0.1:23790. Kill the leader to watch the standby take over.
set -euo pipefail
build=${1:-build}
bin=$build/apps
run_dir=$(mktemp -d /tmp/mooncake-run.XXXXXX)
pids=()
cleanup() {
  trap - INT TERM EXIT
  echo
  echo "stopping: ${pids[*]:-}"
  for p in "${pids[@]:-}"; do [[ -n "$p" ]] && kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:-}"; do [[ -n "$p" ]] && wait "$p" 2>/dev/null || true; done
  rm -rf "$run_dir"
}
trap cleanup EXIT
trap 'exit 0' INT TERM   # Ctrl-C is the normal way to stop: EXIT runs cleanup

wait_port() {  # host port seconds
  local deadline=$((SECONDS + $3))
  until (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do
    ((SECONDS < deadline)) || { echo "timed out waiting for $1:$2" >&2; return 1; }
    sleep 0.1
  done
}

master_addr=127.0.0.1:50051
if [[ ${HA:-} == 1 ]]; then
  command -v etcd >/dev/null || { echo "HA=1 needs etcd (scripts/install-deps.sh installs etcd-server)" >&2; exit 1; }
  echo "== etcd (client 127.0.0.1:23790, peer :23800, data in $run_dir/etcd)"
  etcd --name run --data-dir "$run_dir/etcd" --listen-client-urls http://127.0.0.1:23790 \
    --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23800 \
    --initial-advertise-peer-urls http://127.0.0.1:23800 --initial-cluster run=http://127.0.0.1:23800 \
    --heartbeat-interval 50 --election-timeout 250 --log-level warn >"$run_dir/etcd.log" 2>&1 &
  pids+=($!)
  wait_port 127.0.0.1 23790 20
  ha=(--ha_backend etcd --etcd_endpoints 127.0.0.1:23790 --rpc_address 127.0.0.1)
  echo "== masters (conf/master.toml + ${ha[*]}): RPC 50051 / HTTP 9003 and RPC 50061 / HTTP 9013"
  "$bin/mooncake_master" --config conf/master.toml "${ha[@]}" >"$run_dir/master.log" 2>&1 &
  pids+=($!)
  "$bin/mooncake_master" --config conf/master.toml "${ha[@]}" --rpc_port 50061 --metrics_port 9013 \
    >"$run_dir/master2.log" 2>&1 &
  pids+=($!)
  wait_port 127.0.0.1 50051 20
  wait_port 127.0.0.1 50061 20
  master_addr=etcd://127.0.0.1:23790
else
  echo "== master (conf/master.toml)"
  "$bin/mooncake_master" --config conf/master.toml >"$run_dir/master.log" 2>&1 &
  pids+=($!)
  wait_port 127.0.0.1 50051 20
fi

echo "== client A (conf/client.toml: TE 50052, RPC 12345)"
"$bin/mooncake_client" --config conf/client.toml --client_id node-a --master_server_address "$master_addr" \
  >"$run_dir/a.log" 2>&1 &
pids+=($!)
echo "== client B (conf/client.toml with --port 50053 --client_rpc_port 12346 --http_port 9081)"
"$bin/mooncake_client" --config conf/client.toml --client_id node-b --port 50053 --client_rpc_port 12346 --http_port 9081 \
  --master_server_address "$master_addr" \
  >"$run_dir/b.log" 2>&1 &
pids+=($!)
wait_port 127.0.0.1 12345 30
wait_port 127.0.0.1 12346 30
cli=("$bin/mooncake_cli" --master_server_address "$master_addr")
for _ in $(seq 50); do "${cli[@]}" clients 2>/dev/null | grep -q node-b && break; sleep 0.1; done

echo "== registered clients"
"${cli[@]}" clients
head -c 3000000 /dev/urandom >"$run_dir/value.bin"
echo "== put 3 MB under 'demo/block-0' into node A (remote write through the TransferEngine)"
"${cli[@]}" put --target 127.0.0.1:12345 demo/block-0 "$run_dir/value.bin"
echo "== stat"
"${cli[@]}" stat demo/block-0
echo "== get it back (remote read from the owner) and compare"
"${cli[@]}" get demo/block-0 "$run_dir/back.bin"
cmp "$run_dir/value.bin" "$run_dir/back.bin" && echo "OK: $(stat -c %s "$run_dir/back.bin") bytes identical"
echo "== the co_await API example (examples/kv_cache_example.cpp) joins as a third client"
"$build/examples/kv_cache_example" --master_server_address "$master_addr" --blocks 4
echo
echo "cluster is serving: master 127.0.0.1:50051, clients 127.0.0.1:12345 and :12346."
echo "HTTP: curl -s 127.0.0.1:9003/metrics | curl -s 127.0.0.1:9003/clients | curl -s 127.0.0.1:9080/kv/demo/block-0 | curl -s 127.0.0.1:9081/stats"
echo "try: $bin/mooncake_cli --master_server_address $master_addr clients"
if [[ ${HA:-} == 1 ]]; then
  echo "HA: curl -s 127.0.0.1:9003/health; curl -s 127.0.0.1:9013/health  (role leader / standby);"
  echo "    kill -9 the leader's PID (${pids[1]} or ${pids[2]}) and get demo/block-0 again: the standby answers in ~2-3 s."
fi
echo "logs: $run_dir (removed on exit). Ctrl-C stops everything."
wait "${pids[0]}"
