#!/usr/bin/env bash
# The P2P store end to end over RDMA, inside the Soft-RoCE VM (issue 8):
#   bash scripts/rxe-vm.sh -- bash test/rdma/store_rdma_test.sh BUILD/apps
# Master + RDMA clients A (DRAM) and B (4 MiB DRAM + SSD), all with
# MC_RPC_PROTOCOL=$RPC_PROTO and --protocol rdma: remote write (CLI put) and
# remote read (CLI get) with random payloads at odd sizes on DRAM and SSD, a
# node-to-node remote read through HTTP /kv, /metrics proving RDMA moved the
# bytes; then a TCP-only client C joins (mixed cluster, every direction); then
# B is SIGKILLed (a get of its key fails cleanly, A keeps serving).
# Outside the VM (RXE_VM_DEV unset) it exits 77 (skip).
#
# Every process runs on the VM's one host, where the engine would pick
# cross-memory attach (same_host) before RDMA; MC_TRANSFER_TEST_REFUSE_CMA=1
# (lib/transfer's test hook) turns same_host off, so peers use RDMA (or TCP
# towards C) exactly as on separate hosts.
[[ -n ${RXE_VM_DEV:-} ]] || { echo "RXE_VM_DEV unset: not inside the Soft-RoCE VM, skip"; exit 77; }
BIN=${1:?usage: store_rdma_test.sh BUILD/apps}
RPC_PROTO=${RPC_PROTO:-rdma}           # control plane of master, A, B and the RDMA CLI
H=${RXE_VM_IP:-127.0.0.1}
DEV=$RXE_VM_DEV
source "$(dirname "$0")/../integration/lib.sh"
command -v curl >/dev/null || { echo "curl missing: skip"; exit 77; }
T0=$SECONDS
check() {  # lib.sh's check, plus the seconds each step took (emulated RDMA is slow)
  local what=$1 t=$SECONDS; shift
  if "$@"; then
    PASSES=$((PASSES + 1)); echo "ok   - $what [$((SECONDS - t)) s]"
  else
    FAILS=$((FAILS + 1)); echo "FAIL - $what [$((SECONDS - t)) s]"
  fi
}

# The SSD tier needs O_DIRECT: in the VM /tmp and /var/tmp are a RAM overlay
# (refused), the 9p-shared build directory accepts it.
SSD_DIR=
for base in "$WORK" /var/tmp "$BIN/../test/rdma"; do
  mkdir -p "$base" 2>/dev/null || continue
  d=$(mktemp -d "$base/store-rdma-ssd.XXXXXX" 2>/dev/null) || continue
  if dd if=/dev/zero of="$d/probe" bs=4096 count=2 oflag=direct 2>/dev/null &&
     dd if="$d/probe" of=/dev/null bs=4096 iflag=direct 2>/dev/null; then
    rm -f "$d/probe"; SSD_DIR=$d; break
  fi
  rm -rf "$d"
done
trap 'cleanup; [[ -n $SSD_DIR ]] && rm -rf "$SSD_DIR"' EXIT
[[ -n $SSD_DIR ]] || { echo "no O_DIRECT-capable directory for the SSD tier" >&2; exit 1; }
echo "# rpc protocol: $RPC_PROTO, device $DEV, host $H, SSD tier in $SSD_DIR"
cd "$WORK" || exit 1

MPORT=29251
A_RPC=12451 B_RPC=12452 C_RPC=12453
A_HTTP=19181 B_HTTP=19182 C_HTTP=19183
# `env` execs: spawn's PID is the node's own (SIGKILL reaches it).
RDMA_ENV=(env MC_RPC_PROTOCOL="$RPC_PROTO" MC_TRANSFER_TEST_REFUSE_CMA=1)
TCP_ENV=(env MC_RPC_PROTOCOL=tcp MC_TRANSFER_TEST_REFUSE_CMA=1)
DEV_ARGS=(--device_names "$DEV")
CLI=(timeout 30 "${RDMA_ENV[@]}" "$BIN/mooncake_cli" --master_server_address "$H:$MPORT" --rpc_timeout 20000
     --local_hostname "$H" --protocol rdma --device_names "$DEV")
CLI_TCP=(timeout 30 "${TCP_ENV[@]}" "$BIN/mooncake_cli" --master_server_address "$H:$MPORT" --rpc_timeout 20000
         --local_hostname "$H" --protocol tcp)
CURL=(curl -sS --max-time 30)

client() {  # client NAME RPCPORT TRANSFERPORT HTTPPORT PROTO TIERS_JSON
  local envs=("${RDMA_ENV[@]}") extra=("${DEV_ARGS[@]}")
  [[ $5 == tcp ]] && { envs=("${TCP_ENV[@]}"); extra=(); }
  spawn "$1" "${envs[@]}" "$BIN/mooncake_client" --master_server_address "$H:$MPORT" \
    --local_hostname "$H" --client_rpc_port "$2" --port "$3" --http_port "$4" --deployment_mode P2P \
    --heartbeat_interval 500ms --rpc_timeout 20s --protocol "$5" "${extra[@]}" --tiered_backend_config "$6"
}
wait_up() {  # wait_up NAME PID HTTPPORT : until /health is 200; fails at once when the node exits
  local deadline=$((SECONDS + 60))
  until healthy "$3"; do
    kill -0 "$2" 2>/dev/null || { echo "$1 exited during startup"; tail -n 5 "$WORK/$1.log"; return 1; }
    ((SECONDS < deadline)) || { echo "$1 not healthy after 60 s"; tail -n 5 "$WORK/$1.log" "$WORK/master.log"; return 1; }
    sleep 0.1
  done
}
healthy() { "${CURL[@]}" -f "http://$H:$1/health" >/dev/null 2>&1; }
registered() { [[ $("${CLI[@]}" clients 2>/dev/null | grep -c healthy) == "$1" ]]; }

# metric FILE NAME LABEL_REGEX : sum of the samples of NAME whose labels match.
metric() {
  awk -v n="$2" -v re="$3" '$1 ~ "^" n "\\{" && $1 ~ re { s += $NF } END { printf "%.0f\n", s + 0 }' "$1"
}
scrape() { "${CURL[@]}" "http://$H:$1/metrics" >"$2"; }
positive() { (($(metric "$@") > 0)); }
zero() { (($(metric "$@") == 0)); }
at_least() { (($(metric "$1" "$2" "$3") >= $4)); }  # at_least FILE NAME LABEL_REGEX MIN

# --- Master, A (DRAM only), B (4 MiB DRAM + SSD), RDMA everywhere.
spawn master "${RDMA_ENV[@]}" "$BIN/mooncake_master" --deployment_mode P2P \
  --rpc_address 0.0.0.0 --rpc_port "$MPORT" --metrics_port 0
MASTER=$LAST_PID
client a $A_RPC 29252 $A_HTTP rdma '{"tiers":[{"type":"DRAM","capacity":"16MiB","priority":100}]}'
A=$LAST_PID
client b $B_RPC 29253 $B_HTTP rdma \
  '{"tiers":[{"type":"DRAM","capacity":"4MiB","priority":100},{"type":"SSD","capacity":"24MiB","priority":10,"path":"'"$SSD_DIR"'"}]}'
B=$LAST_PID
echo "# master and clients spawned at $((SECONDS - T0)) s"
wait_up a "$A" $A_HTTP || exit 1
echo "# A healthy at $((SECONDS - T0)) s"
wait_up b "$B" $B_HTTP || exit 1
check "master, A and B up over rpc=$RPC_PROTO; both clients registered" wait_for 20 registered 2
echo "# cluster up after $((SECONDS - T0)) s"

# --- Remote write (CLI put --target) and remote read (CLI get), odd sizes.
roundtrip() {  # roundtrip KEY BYTES TARGET [CLI...]
  local key=$1 size=$2 target=$3; shift 3
  local cli=("${@}"); ((${#cli[@]})) || cli=("${CLI[@]}")
  random_file "in.$key" "$size"
  "${cli[@]}" put --target "$target" "$key" "in.$key" 2>>cli.err || return 1
  "${cli[@]}" get "$key" "out.$key" 2>>cli.err || return 1
  cmp -s "in.$key" "out.$key"
}
for size in 1 4097 1048577 5000003; do
  check "RDMA remote write + read of $size bytes on A (DRAM)" roundtrip "a-$size" "$size" "$H:$A_RPC"
  what="DRAM"; ((size > 4 << 20)) && what="larger than its 4 MiB DRAM tier: SSD"
  check "RDMA remote write + read of $size bytes on B ($what)" roundtrip "b-$size" "$size" "$H:$B_RPC"
done
scrape $B_HTTP m.b0
check "B's SSD tier holds the 5000003-byte value ($(metric m.b0 mc_tier_used_bytes 'type="SSD"') bytes used)" \
  at_least m.b0 mc_tier_used_bytes 'type="SSD"' 5000003

# --- Node to node: PUT into A through its /kv, GET through B's /kv (A writes into B over RDMA).
n2n() {  # n2n KEY BYTES FROM_HTTP TO_HTTP
  random_file "in.$1" "$2"
  "${CURL[@]}" -f -X PUT --data-binary "@in.$1" "http://$H:$3/kv/$1" >/dev/null 2>>curl.err || return 1
  "${CURL[@]}" -f -D "hdr.$1" "http://$H:$4/kv/$1" -o "out.$1" 2>>curl.err || return 1
  grep -qi '^x-mc-local: *false' "hdr.$1" && cmp -s "in.$1" "out.$1"
}
check "PUT via A's /kv, remote GET via B's /kv (1000003 bytes)" n2n n2n-ab 1000003 $A_HTTP $B_HTTP
check "PUT via B's /kv, remote GET via A's /kv (4099 bytes)" n2n n2n-ba 4099 $B_HTTP $A_HTTP

# --- RDMA really carried the data (and not same_host or TCP).
scrape $A_HTTP m.a
scrape $B_HTTP m.b
for n in a b; do
  check "${n^^}: mc_transfer_bytes_total{transport=\"rdma\"} > 0 ($(metric m.$n mc_transfer_bytes_total 'transport="rdma"') bytes)" \
    positive m.$n mc_transfer_bytes_total 'transport="rdma"'
  check "${n^^}: no byte moved over tcp or same_host" zero m.$n mc_transfer_bytes_total 'transport="(tcp|same_host)"'
  check "${n^^}: mc_transfer_rdma_device_bytes_total{device=\"$DEV\"} > 0" \
    positive m.$n mc_transfer_rdma_device_bytes_total "device=\"$DEV\""
  check "${n^^}: mc_rpc_connections_total{transport=\"$RPC_PROTO\",side=\"client\"} > 0" \
    positive m.$n mc_rpc_connections_total "transport=\"$RPC_PROTO\".*side=\"client\"|side=\"client\".*transport=\"$RPC_PROTO\""
done

# --- Mixed cluster: C is TCP only (transfers and control plane) and joins the same master.
client c $C_RPC 29254 $C_HTTP tcp '{"tiers":[{"type":"DRAM","capacity":"32MiB","priority":100}]}'
C=$LAST_PID
wait_up c "$C" $C_HTTP || exit 1
check "TCP-only client C registered next to A and B" wait_for 20 registered 3
put_then_kv_get() {  # put_then_kv_get KEY FILE TARGET HTTP... : CLI put on TARGET, GET via each node's /kv
  local key=$1 file=$2 target=$3; shift 3
  "${CLI[@]}" put --target "$target" "$key" "$file" 2>>cli.err || return 1
  for port in "$@"; do
    "${CURL[@]}" -f "http://$H:$port/kv/$key" -o "out.$key.$port" 2>>curl.err || return 1
    cmp -s "$file" "out.$key.$port" || return 1
  done
}
random_file in.mx-c 1048589
check "remote write RDMA CLI -> C, remote read C -> A and C -> B via their /kv" \
  put_then_kv_get mx-c in.mx-c "$H:$C_RPC" $A_HTTP $B_HTTP
check "PUT via C's /kv, remote GET via A's /kv (C writes into A over TCP)" n2n mx-ca 1500007 $C_HTTP $A_HTTP
check "PUT via C's /kv, remote GET via B's /kv" n2n mx-cb 1000033 $C_HTTP $B_HTTP
check "PUT via A's /kv, remote GET via C's /kv (A falls back to TCP towards C)" n2n mx-ac 1500007 $A_HTTP $C_HTTP
check "PUT via B's /kv (lands on SSD), remote GET via C's /kv" n2n mx-bc 5000011 $B_HTTP $C_HTTP
put_kv_cmp() {  # put_kv_cmp KEY BYTES TARGET_RPC TARGET_HTTP CLI... : remote write, read back via the target's /kv
  local key=$1 size=$2 target=$3 http=$4; shift 4
  random_file "in.$key" "$size"
  "$@" put --target "$target" "$key" "in.$key" 2>>cli.err || return 1
  "${CURL[@]}" -f "http://$H:$http/kv/$key" -o "out.$key" 2>>curl.err && cmp -s "in.$key" "out.$key"
}
check "TCP-only CLI (C's side): remote write into A, read back via A's /kv" \
  put_kv_cmp mx-tcp-a 1048583 "$H:$A_RPC" $A_HTTP "${CLI_TCP[@]}"
check "TCP-only CLI (C's side): remote write into B, read back via B's /kv" \
  put_kv_cmp mx-tcp-b 777777 "$H:$B_RPC" $B_HTTP "${CLI_TCP[@]}"
check "RDMA CLI: remote write into C, read back via C's /kv" put_kv_cmp mx-rdma-c 2000003 "$H:$C_RPC" $C_HTTP "${CLI[@]}"
scrape $A_HTTP m.a2
scrape $C_HTTP m.c
check "A moved bytes over TCP to C (fallback)" positive m.a2 mc_transfer_bytes_total 'transport="tcp"'
check "C moved bytes over TCP" positive m.c mc_transfer_bytes_total 'transport="tcp"'
check "C moved no byte over rdma or same_host" zero m.c mc_transfer_bytes_total 'transport="(rdma|same_host)"'
grep -q '^mc_rpc_connections_total' m.c &&
  check "C opened no RDMA RPC connection" zero m.c mc_rpc_connections_total 'transport="rdma"'

# --- A killed peer: B's own key fails cleanly (exit 1, bounded), A keeps serving.
random_file in.only-b 300007
check "a key stored only on B" "${CLI[@]}" put --target "$H:$B_RPC" only-b in.only-b 2>>cli.err
kill -KILL "$B"; wait "$B" 2>/dev/null
start=$SECONDS
"${CLI[@]}" get only-b out.only-b 2>err.only-b; rc=$?
took=$((SECONDS - start))
check "get of a key only the SIGKILLed B held exits 1 within ${took}s" \
  bash -c "[[ $rc == 1 ]] && (( $took <= 20 ))"
code=$("${CURL[@]}" -o /dev/null -w '%{http_code}' "http://$H:$A_HTTP/kv/only-b" 2>/dev/null)
check "A's /kv answers an error (not 200) for B's key, bounded (HTTP $code)" bash -c "[[ $code =~ ^[45][0-9][0-9]$ ]]"
cli_get_cmp() { "${CLI[@]}" get "$1" "out.$1.again" 2>>cli.err && cmp -s "in.$1" "out.$1.again"; }
kv_get_cmp() { "${CURL[@]}" -f "http://$H:$1/kv/$2" -o "out.$2.kv" 2>>curl.err && cmp -s "in.$2" "out.$2.kv"; }
check "A still serves its keys over RDMA (CLI get)" cli_get_cmp a-1048577
check "A still serves its keys via /kv" kv_get_cmp $A_HTTP a-4097

echo "# runtime $((SECONDS - T0)) s"
ps -o pid,time,rss,args -p "$MASTER,$A,$C" 2>/dev/null | cut -c1-100 | sed 's/^/# /'
if ((FAILS)); then
  for f in "$WORK"/*.log "$WORK"/cli.err "$WORK"/curl.err "$WORK"/err.only-b; do
    [[ -s $f ]] && { echo "--- $f (tail)"; tail -n 15 "$f"; }
  done
fi
finish
