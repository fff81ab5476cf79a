#!/usr/bin/env bash
# End-to-end test with real processes: the spec's launch commands verbatim,
# remote read and remote write through mooncake_cli, missing keys, a stopped
# peer (timeout), an overwrite on another node then a killed old owner, a master restart, bad input.
BIN=${1:?usage: cluster_test.sh BUILD/apps}
source "$(dirname "$0")/lib.sh"
trap cleanup EXIT
cd "$WORK"
# The CLI's own messages go to cli.log, which a failing check prints (lib.sh dump_logs).
CLI=("$BIN/mooncake_cli" --master_server_address 127.0.0.1:50051 --rpc_timeout 3000)
TIERS='{"tiers":[{"type":"DRAM","capacity":536870912,"priority":100,"allocator_type":"OFFSET"}]}'

# --- The spec's launch commands, verbatim (plus a second client on other ports).
spawn master "$BIN/mooncake_master" --deployment_mode P2P --rpc_port 50051
MASTER=$LAST_PID
wait_port 127.0.0.1 50051 20 || exit 1
spawn a "$BIN/mooncake_client" \
  --master_server_address 127.0.0.1:50051 \
  --port 50052 --client_rpc_port 12345 \
  --deployment_mode P2P \
  --tiered_backend_config "$TIERS"
A=$LAST_PID
mkdir -p ssd-b
spawn b "$BIN/mooncake_client" --master_server_address=127.0.0.1:50051 --port=50053 --client_rpc_port=12346 \
  --deployment_mode=P2P --heartbeat_interval 200ms \
  --tiered_backend_config '{"tiers":[{"type":"DRAM","capacity":"4MiB","priority":100},{"type":"SSD","capacity":"256MiB","priority":10,"path":"'"$WORK/ssd-b"'"}]}'
B=$LAST_PID
wait_port 127.0.0.1 12345 30 || exit 1
wait_port 127.0.0.1 12346 30 || exit 1
check "both clients registered" wait_for 10 bash -c "'${CLI[0]}' --master_server_address 127.0.0.1:50051 clients | grep -c healthy | grep -qx 2"

# --- Remote write (CLI -> node) and remote read (node -> CLI), odd sizes, DRAM and DRAM+SSD.
roundtrip() {  # roundtrip KEY BYTES TARGET
  random_file "in.$1" "$2"
  "${CLI[@]}" put --target "$3" "$1" "in.$1" 2>>cli.log || return 1
  "${CLI[@]}" get "$1" "out.$1" 2>>cli.log || return 1
  cmp -s "in.$1" "out.$1"
}
for size in 1 4097 1048577 5000003; do
  check "remote write + remote read of $size bytes on A (DRAM)" roundtrip "a-$size" "$size" 127.0.0.1:12345
  check "remote write + remote read of $size bytes on B (DRAM+SSD)" roundtrip "b-$size" "$size" 127.0.0.1:12346
done
check "64 MiB value through the SSD tier" roundtrip big $((64 * 1024 * 1024)) 127.0.0.1:12346
check "stat names the owner" bash -c "'${CLI[0]}' --master_server_address 127.0.0.1:50051 stat b-1 | grep -q 'owner: 127.0.0.1:12346 rpc=127.0.0.1:12346 transfer=127.0.0.1:50053'"
check "get to stdout" bash -c "'${CLI[0]}' --master_server_address 127.0.0.1:50051 get a-4097 | cmp -s - in.a-4097"
# --- Replicated put through the CLI: both nodes hold a copy (SSD on B).
random_file in.rep 300007
check "put --replicas 2 stores on both nodes" "${CLI[@]}" put --replicas 2 rep in.rep
check "stat lists both copies" bash -c "'${CLI[0]}' --master_server_address 127.0.0.1:50051 stat rep | grep -c '^owner:' | grep -qx 2"
check "the replicated value reads back" bash -c "'${CLI[0]}' --master_server_address 127.0.0.1:50051 get rep | cmp -s - in.rep"
"${CLI[@]}" put --replicas 3 rep3 in.rep 2>err.txt; rc=$?
check "more copies than nodes: exit 1 with REPLICATION_INCOMPLETE" bash -c "[[ $rc == 1 ]] && grep -q REPLICATION_INCOMPLETE err.txt"

# --- Missing key and usage errors.
"${CLI[@]}" get no-such-key out.none 2>err.txt; rc=$?
check "missing key exits 1 with OBJECT_NOT_FOUND" bash -c "[[ $rc == 1 ]] && grep -q OBJECT_NOT_FOUND err.txt"
"${CLI[@]}" frobnicate 2>>cli.log; rc=$?
check "unknown command exits 2" test "$rc" = 2
"$BIN/mooncake_client" --deployment_mode HA 2>>cli.log; rc=$?
check "a non-P2P client is refused" test "$rc" = 2
"$BIN/mooncake_client" --tiered_backend_config '{"tiers":[{"type":"TAPE","capacity":1}]}' 2>err.txt; rc=$?
check "a broken tier config names the field" bash -c "[[ $rc == 2 ]] && grep -q 'tiers\[0\].type' err.txt"

# --- Bad input on every port: garbage, a truncated frame, an oversize frame.
for port in 50051 12345 12346 50052 50053; do
  head -c 65536 /dev/urandom >/dev/tcp/127.0.0.1/$port 2>/dev/null
  printf '\x00\x00\x00\x00\xff\xff\xff\x7f' >/dev/tcp/127.0.0.1/$port 2>/dev/null
  printf '\x00\x00\x00' >/dev/tcp/127.0.0.1/$port 2>/dev/null
done
check "nodes keep serving and keep their data after garbage on every port" \
  bash -c "'${CLI[0]}' --master_server_address 127.0.0.1:50051 get b-5000003 out.after && cmp -s in.b-5000003 out.after"

# --- The API example joins as a client, stores, reads back, reads a remote block, leaves.
check "the co_await API example runs against the cluster" \
  bash -c "'$BIN/../examples/kv_cache_example' --master_server_address 127.0.0.1:50051 --blocks 3 --block_bytes 100003 >/dev/null"

# --- remove really removes.
"${CLI[@]}" remove a-1 2>>cli.log
"${CLI[@]}" exists a-1 >/dev/null 2>&1; rc=$?
check "remove removes the key everywhere" test "$rc" = 1

# --- A stopped peer: the get fails with TIMEOUT at the deadline, no hang.
random_file in.stop 100000
"${CLI[@]}" put --target 127.0.0.1:12346 stopped-key in.stop 2>>cli.log
kill -STOP "$B"
start=$SECONDS
timeout 30 "$BIN/mooncake_cli" --master_server_address 127.0.0.1:50051 --rpc_timeout 2000 get stopped-key out.stop 2>err.txt; rc=$?
took=$((SECONDS - start))
kill -CONT "$B"
check "a SIGSTOPped owner yields TIMEOUT within the deadline (took ${took}s)" \
  bash -c "[[ $rc == 1 ]] && grep -q TIMEOUT err.txt && (( $took <= 10 ))"

# --- The same key written on two nodes: the last publish wins (no replication
# yet), the older copy is no longer routed, and killing its node changes nothing.
random_file in.dup 300000
random_file in.dup2 300000
"${CLI[@]}" put --target 127.0.0.1:12345 dup in.dup 2>>cli.log
"${CLI[@]}" put --target 127.0.0.1:12346 dup in.dup2 2>>cli.log
"${CLI[@]}" stat dup >stat.dup 2>>cli.log
check "an overwrite on another node leaves one owner, the last writer" \
  bash -c "[[ \$(grep -c owner stat.dup) == 1 ]] && grep owner stat.dup | grep -q 12346"
kill -KILL "$A"; wait "$A" 2>/dev/null
check "with the old owner killed, the key reads the new bytes" \
  bash -c "'${CLI[0]}' --master_server_address 127.0.0.1:50051 --rpc_timeout 3000 get dup out.dup 2>>cli.log && cmp -s in.dup2 out.dup"

# --- Master restart: the surviving client re-registers and re-publishes by itself.
kill -TERM "$MASTER"; wait "$MASTER" 2>/dev/null
spawn master2 "$BIN/mooncake_master" --deployment_mode P2P --rpc_port 50051
wait_port 127.0.0.1 50051 20
check "after a master restart the client re-publishes its keys" \
  wait_for 15 bash -c "'${CLI[0]}' --master_server_address 127.0.0.1:50051 stat b-1048577 | grep -q 12346"
check "and remote reads work again" \
  bash -c "'${CLI[0]}' --master_server_address 127.0.0.1:50051 get b-1048577 out.re && cmp -s in.b-1048577 out.re"

finish
