#!/usr/bin/env bash
# Starts a local P2P cluster from conf/: one master and two clients, shows a
# cross-node put and get with mooncake_cli, then keeps serving until Ctrl-C
# and stops every process it started (and nothing else).
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

echo "== master (conf/master.toml)"
"$bin/mooncake_master" --config conf/master.toml >"$run_dir/master.log" 2>&1 &
pids+=($!)
wait_port 127.0.0.1 50051 20

echo "== client A (conf/client.toml: TE 50052, RPC 12345)"
"$bin/mooncake_client" --config conf/client.toml --client_id node-a >"$run_dir/a.log" 2>&1 &
pids+=($!)
echo "== client B (conf/client.toml with --port 50053 --client_rpc_port 12346 --http_port 9081)"
"$bin/mooncake_client" --config conf/client.toml --client_id node-b --port 50053 --client_rpc_port 12346 --http_port 9081 \
  >"$run_dir/b.log" 2>&1 &
pids+=($!)
wait_port 127.0.0.1 12345 30
wait_port 127.0.0.1 12346 30
cli=("$bin/mooncake_cli" --master_server_address 127.0.0.1:50051)
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
"$build/examples/kv_cache_example" --master_server_address 127.0.0.1:50051 --blocks 4
echo
echo "cluster is serving: master 127.0.0.1:50051, clients 127.0.0.1:12345 and :12346."
echo "HTTP: curl -s 127.0.0.1:9003/metrics | curl -s 127.0.0.1:9003/clients | curl -s 127.0.0.1:9080/kv/demo/block-0 | curl -s 127.0.0.1:9081/stats"
echo "try: $bin/mooncake_cli --master_server_address 127.0.0.1:50051 clients"
echo "logs: $run_dir (removed on exit). Ctrl-C stops everything."
wait "${pids[0]}"
