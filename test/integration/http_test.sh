#!/usr/bin/env bash
# HTTP endpoints of real nodes: /metrics (promtool), /health (starting, not
# registered, draining), admin JSON, /kv round trips (local and remote, 1 B to
# 64 MiB), and hostile requests (malformed, oversize, slow, too many).
BIN=${1:?usage: http_test.sh BUILD/apps}
source "$(dirname "$0")/lib.sh"
trap cleanup EXIT
cd "$WORK"
command -v curl >/dev/null || { echo "curl missing: skip"; exit 77; }
PROMTOOL=$(command -v promtool || true)

# Fixed ports stay below the kernel's ephemeral range (32768-60999): an outgoing
# connection of an earlier step can never be holding one of them.
MRPC=29251 MHTTP=19203
AHTTP=19281 BHTTP=19282
M="http://127.0.0.1:$MHTTP" A="http://127.0.0.1:$AHTTP" B="http://127.0.0.1:$BHTTP"
C=(curl -sS --max-time 20)

spawn master "$BIN/mooncake_master" --rpc_port $MRPC --metrics_port $MHTTP --http_host 127.0.0.1 --client_ttl 1000 \
  --client_drop_ttl 5000 --drain_grace 3000
MASTER=$LAST_PID
wait_port 127.0.0.1 $MHTTP 20 || exit 1
node() { spawn_client "$1" $MRPC "$2" "$3" "$4" 256MiB "${@:5}"; }  # node NAME TE_PORT RPC_PORT HTTP_PORT EXTRA...
node a 29252 12545 $AHTTP --http_read_timeout 1000 --http_max_connections 8
A_PID=$LAST_PID
node b 29253 12546 $BHTTP --drain_grace 3000
B_PID=$LAST_PID
check "master /health is 200 while serving" wait_for 20 "${C[@]}" -f "$M/health"
check "client A /health is 200 once registered" wait_for 20 "${C[@]}" -f "$A/health"
check "client B /health is 200 once registered" wait_for 20 "${C[@]}" -f "$B/health"

metric() {  # metric URL 'name{labels}' -> sum of matching samples (0 if none)
  "${C[@]}" "$1/metrics" | awk -v n="$2" 'index($0, n) == 1 { s += $NF } END { printf "%.0f\n", s + 0 }'
}
if [[ -n "$PROMTOOL" ]]; then
  check "promtool accepts the master's /metrics" bash -c "curl -sS '$M/metrics' | '$PROMTOOL' check metrics"
else
  echo "promtool missing (apt install prometheus): exposition not validated"
fi

# --- Workload: a put raises the master's key count; a remote get moves bytes.
keys0=$(metric "$M" "mc_master_keys ")
random_file v1 4097
check "PUT /kv/k1 on A" bash -c "${C[*]} -f -X PUT --data-binary @v1 '$A/kv/k1' | grep -q '\"size\":4097'"
check "a put raises mc_master_keys" test "$(metric "$M" "mc_master_keys ")" -eq $((keys0 + 1))
b_remote0=$(metric "$B" 'mc_client_gets_total{result="remote_hit"}')
b_inline0=$(metric "$B" 'mc_client_inline_reads_total ')
b_calls0=$(metric "$B" 'mc_client_read_calls_total ')
a_served_calls0=$(metric "$A" 'mc_transfer_calls_total{side="served",outcome="ok"}')
check "GET /kv/k1 on B (held by A) returns the value" bash -c "${C[*]} -f '$B/kv/k1' -o got1 && cmp -s v1 got1"
check "...inline, as one TransferEngine call (4097 bytes <= the 64 KiB inline threshold)" bash -c "
  test $(metric "$B" 'mc_client_inline_reads_total ') -gt $b_inline0 &&
  test $(metric "$B" 'mc_client_read_calls_total ') -gt $b_calls0 &&
  test $(metric "$A" 'mc_transfer_calls_total{side="served",outcome="ok"}') -gt $a_served_calls0 &&
  test $(metric "$B" 'mc_client_gets_total{result="remote_hit"}') -gt $b_remote0"
# A value above the inline threshold moves through the TransferEngine.
random_file vbig 100001
check "PUT /kv/kbig on A" bash -c "${C[*]} -f -X PUT --data-binary @vbig '$A/kv/kbig' | grep -q '\"size\":100001'"
a_tx0=$(metric "$A" 'mc_transfer_bytes_total{')
b_served0=$(metric "$B" 'mc_transfer_served_bytes_total{')
check "GET /kv/kbig on B (held by A) returns the value" bash -c "${C[*]} -f '$B/kv/kbig' -o gotbig && cmp -s vbig gotbig"
check "the remote get moved >= 100001 bytes on A's engine" \
  test "$(metric "$A" 'mc_transfer_bytes_total{')" -ge $((a_tx0 + 100001))
check "...and raised B's served bytes" \
  test "$(metric "$B" 'mc_transfer_served_bytes_total{')" -ge $((b_served0 + 100001))
check "RPC metrics count master calls per method (client side on B)" \
  test "$(metric "$B" 'mc_rpc_calls_total{method="Master.getReplicaList",side="client"}')" -gt 0
# The first heartbeat leaves one heartbeat_interval (1 s) after start: wait for it.
heartbeats_counted() { test "$(metric "$A" 'mc_rpc_calls_total{method="Master.heartbeat",side="client"}')" -gt 0; }
check "RPC metrics count heartbeats (client side on A)" wait_for 10 heartbeats_counted
check "RPC metrics count served peer reads on A (server side)" \
  bash -c "curl -sS '$A/metrics' | grep -q '^mc_rpc_calls_total{method=\"[A-Za-z]*\.[A-Za-z]*\",side=\"server\"} [1-9]'"
check "RPC latency histogram has +Inf bucket = count" bash -c "
  curl -sS '$A/metrics' | grep -q 'mc_rpc_latency_seconds_bucket{method=\"Client.*le=\"+Inf\"}' ||
  curl -sS '$A/metrics' | grep -q 'mc_rpc_latency_seconds_bucket{method=.*le=\"+Inf\"}'"
check "tier and key-lock metrics present" bash -c "curl -sS '$A/metrics' | grep -q '^mc_tier_used_bytes{tier=\"0\",type=\"DRAM\"} [1-9]' &&
  curl -sS '$A/metrics' | grep -q '^mc_key_lock_wait_seconds_total '"
check "process metrics present" bash -c "curl -sS '$A/metrics' | grep -q '^process_resident_memory_bytes [1-9]' &&
  curl -sS '$M/metrics' | grep -q '^mc_process_uptime_seconds '"
# Families of the ordering, same-host and refusal counters (issue 13): each
# has its TYPE line and a sample (counters are 0 here, but present).
families_present() {
  local page f
  page=$("${C[@]}" "$1/metrics") || return 1
  for f in mc_client_removal_notices_total mc_client_notice_batches_total mc_client_notice_overflows_total \
    mc_client_resyncs_total mc_client_superseded_drops_total mc_client_stale_publishes_total mc_client_failed_publishes_total \
    mc_client_batch_calls_total mc_client_batch_rpcs_total mc_client_inline_reads_total mc_client_publish_batches_total \
    mc_transfer_same_host_fallbacks_total mc_transfer_revoked_with_grants_total mc_transfer_same_host_grants_held \
    mc_transfer_same_host_range_grants_total \
    'mc_store_refused_total{reason="overloaded"}' 'mc_store_refused_total{reason="access_denied"}' \
    'mc_store_batches_served_total{op="read"}' 'mc_store_batches_served_total{op="write"}' \
    'mc_store_batch_stage_seconds_total{op="read",stage="transfer"}' \
    'mc_store_batch_stage_seconds_total{op="write",stage="commit"}'; do
    grep -q "^# TYPE ${f%%\{*} " <<<"$page" || { echo "no TYPE line for $f"; return 1; }
    awk -v s="$f " 'index($0, s) == 1 { found = 1 } END { exit !found }' <<<"$page" ||
      { echo "no sample of $f"; return 1; }
  done
}
check "ordering, same-host, refusal and served-batch metric families present on A" families_present "$A"
check "master counts two healthy clients" test "$(metric "$M" 'mc_master_clients{health="healthy"}')" -eq 2
if [[ -n "$PROMTOOL" ]]; then
  check "promtool accepts client /metrics during the workload" bash -c "curl -sS '$A/metrics' | '$PROMTOOL' check metrics &&
    curl -sS '$B/metrics' | '$PROMTOOL' check metrics"
fi

# --- /kv round trips: 1 B .. 64 MiB, written on one node, read on both.
for size in 1 4097 1048577 5000003 $((64 * 1024 * 1024)); do
  random_file "in.$size" "$size"
  check "PUT $size bytes on B, GET on B (local) and A (remote) match" bash -c "
    ${C[*]} -f -X PUT --data-binary @in.$size '$B/kv/rt-$size' >/dev/null &&
    ${C[*]} -f '$B/kv/rt-$size' -o lb.$size && cmp -s in.$size lb.$size &&
    ${C[*]} -f -D hdr.$size '$A/kv/rt-$size' -o ra.$size && cmp -s in.$size ra.$size &&
    grep -qi 'X-Mc-Local: false' hdr.$size"
  rm -f "lb.$size" "ra.$size"
done
check "a key with spaces and slashes (percent-encoded)" bash -c "
  ${C[*]} -f -X PUT --data-binary @v1 '$A/kv/dir%2Fsub%20key' >/dev/null && ${C[*]} -f '$B/kv/dir%2Fsub%20key' -o g2 && cmp -s v1 g2"

# --- Admin JSON.
check "/clients lists both clients" bash -c "curl -sS '$M/clients' | grep -o '\"health\":\"healthy\"' | wc -l | grep -qx 2"
check "/keys?prefix=rt-&limit=2 is bounded" bash -c "
  curl -sS '$M/keys?prefix=rt-&limit=2' | grep -o '\"key\":\"rt-' | wc -l | grep -qx 2"
check "/keys with a bad limit is 400" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' '$M/keys?limit=abc') == 400 ]]"
check "/key/k1 names size and holder" bash -c "curl -sS '$M/key/k1' | grep -q '\"size\":4097,\"replicas\":\[{\"client_id\"'"
check "/key/<missing> is 404 OBJECT_NOT_FOUND" bash -c "
  [[ \$(curl -s -o body -w '%{http_code}' '$M/key/nope') == 404 ]] && grep -q OBJECT_NOT_FOUND body"
check "client /stats is JSON with tiers and transfer" bash -c "curl -sS '$A/stats' | grep -q '\"tiers\":\[{\"type\":\"DRAM\"'"

# --- Missing keys, delete, methods.
code() { curl -s -o body -w '%{http_code}' --max-time 20 "$@"; }
check "GET of a missing key is 404 OBJECT_NOT_FOUND" bash -c "[[ \$(curl -s -o body -w '%{http_code}' '$A/kv/none') == 404 ]] && grep -q OBJECT_NOT_FOUND body"
check "DELETE /kv/k1 on B removes A's key" test "$(code -X DELETE "$B/kv/k1")" = 200
check "...then GET on A is 404" test "$(code "$A/kv/k1")" = 404
check "...and DELETE again is 404" test "$(code -X DELETE "$A/kv/k1")" = 404
check "POST /kv/x is 405" test "$(code -X POST --data x "$A/kv/x")" = 405
check "PUT of an empty value is 400" test "$(code -X PUT --data-binary '' "$A/kv/x")" = 400
check "unknown path is 404" test "$(code "$A/nope")" = 404

# --- Hostile requests. raw PORT DATA: sends DATA (printf format), prints the status line.
raw() {
  timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"; printf "$1" >&3; head -n1 <&3' "$1" "$2" 2>/dev/null | tr -d '\r'
}
check "garbage request line -> 400" test "$(raw $AHTTP 'GARBAGE\r\n\r\n')" = 'HTTP/1.1 400 Bad Request'
big=$(head -c 20000 /dev/zero | tr '\0' a)
check "20 KB header -> 431" test "$(raw $AHTTP "GET /health HTTP/1.1\r\nX-Big: $big\r\n\r\n")" = \
  'HTTP/1.1 431 Request Header Fields Too Large'
check "Content-Length above the max value -> 413 before any body" \
  test "$(raw $AHTTP 'PUT /kv/huge HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n')" = 'HTTP/1.1 413 Payload Too Large'
check "body on a body-less route -> 413" \
  test "$(raw $AHTTP 'GET /health HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello')" = 'HTTP/1.1 413 Payload Too Large'
head -c $((64 * 1024 * 1024 + 10)) /dev/zero >over
check "chunked body above the max -> 413" test "$(code -X PUT -H 'Transfer-Encoding: chunked' --data-binary @over "$A/kv/over")" = 413
rm -f over
check "bad percent-encoding -> 400" test "$(raw $AHTTP 'GET /kv/%%zz HTTP/1.1\r\n\r\n')" = 'HTTP/1.1 400 Bad Request'
check "bad HTTP version -> 400" test "$(raw $AHTTP 'GET / HTTP/9.x\r\n\r\n')" = 'HTTP/1.1 400 Bad Request'
check "bad Content-Length -> 400" test "$(raw $AHTTP 'PUT /kv/x HTTP/1.1\r\nContent-Length: -5\r\n\r\n')" = \
  'HTTP/1.1 400 Bad Request'

# Slow loris: one header byte per 300 ms; the 1 s header deadline closes it.
slow() (
  trap '' PIPE  # the server closes mid-request: writes then fail with EPIPE
  exec 3<>"/dev/tcp/127.0.0.1/$AHTTP" || return 1
  local t0=$SECONDS
  for c in G E T ' ' / h e a l t h ' ' H T T P / 1 . 1; do
    printf '%s' "$c" >&3 2>/dev/null || break
    sleep 0.3
  done
  exec 3>&-
  ((SECONDS - t0 <= 4))  # cut off well before the 21 bytes (6 s) were sent
)
check "a slow-loris client is disconnected by the read deadline" slow

# Connection bound (A allows 8): 8 idle connections, then a 9th is answered
# 503 with Retry-After (not reset), and counted.
refused0=$(metric "$A" 'mc_http_connections_refused_total ')
for i in 1 2 3 4 5 6 7 8; do exec {fd}<>"/dev/tcp/127.0.0.1/$AHTTP"; HOLD+=("$fd"); done
check "the connection over the bound is answered 503 with Retry-After, not reset" bash -c "
  curl -s --max-time 3 -D hdrs -o body '$A/health' ; grep -q '^HTTP/1.1 503' hdrs && grep -qi '^Retry-After: 1' hdrs &&
  grep -q OVERLOADED body"
for fd in "${HOLD[@]}"; do exec {fd}>&-; done
check "...and served again once they close (read deadline frees them)" wait_for 10 curl -sf "$A/health"
check "...and the over-bound connection was counted" \
  test "$(metric "$A" 'mc_http_connections_refused_total ')" -gt "$refused0"
check "A is alive after the hostile requests" kill -0 "$A_PID"
check "bad requests are counted" test "$(metric "$A" 'mc_http_bad_requests_total ')" -ge 5

# --- /health: client not registered when the master is gone; draining on SIGTERM.
kill -TERM "$B_PID"
check "client B /health is 503 draining during its drain grace" bash -c "
  [[ \$(curl -s -o body -w '%{http_code}' '$B/health') == 503 ]] && grep -q draining body"
wait_for 15 bash -c "! kill -0 $B_PID" ; check "client B exits after the grace" bash -c "! kill -0 $B_PID"
kill -TERM "$MASTER"
check "master /health is 503 draining during its grace" bash -c "
  [[ \$(curl -s -o body -w '%{http_code}' '$M/health') == 503 ]] && grep -q draining body"
wait_for 15 bash -c "! kill -0 $MASTER"
check "client A /health is 503 not_registered without a master" wait_for 15 bash -c "
  [[ \$(curl -s -o body -w '%{http_code}' '$A/health') == 503 ]] && grep -q not_registered body"
check "A's /metrics shows it unregistered" test "$(metric "$A" 'mc_client_registered ')" -eq 0

# --- HTTP off.
spawn c "$BIN/mooncake_client" --master_server_address 127.0.0.1:$MRPC --port 29254 --client_rpc_port 12547 \
  --http_port 0
wait_port 127.0.0.1 12547 20
check "--http_port 0 switches HTTP off" grep -q "http off" "$WORK/c.log"
finish
