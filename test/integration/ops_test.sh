#!/usr/bin/env bash
# Operators' tooling: --version on every binary; two client nodes started on one
# host with the spec's launch commands (no --http_port) each serve HTTP on a port
# derived from their client RPC port, register it with the master (/clients,
# `mooncake_cli clients`), and the master's Prometheus HTTP service discovery
# (/prometheus/targets) lists every healthy node's metrics address and its own.
BIN=${1:?usage: ops_test.sh BUILD/apps PROJECT_VERSION}
VERSION=${2:?usage: ops_test.sh BUILD/apps PROJECT_VERSION}
source "$(dirname "$0")/lib.sh"
trap cleanup EXIT
cd "$WORK"
command -v curl >/dev/null || { echo "curl missing: skip"; exit 77; }
command -v jq >/dev/null || { echo "jq missing: skip"; exit 77; }
PROMTOOL=$(command -v promtool || true)
C=(curl -sS --max-time 20)

# --- --version: "<binary> <meson project version> (<git describe or unknown>)", exit 0.
for b in mooncake_master mooncake_client mooncake_cli; do
  check "$b --version prints '$b $VERSION (<revision>)' and exits 0" bash -c "
    out=\$('$BIN/$b' --version) && [[ \$(printf '%s\n' \"\$out\" | wc -l) -eq 1 ]] &&
    [[ \"\$out\" =~ ^$b\ ${VERSION//./\\.}\ \\([^\ ()]+\\)\$ ]]"
done

# Fixed ports stay below the kernel's ephemeral range (32768-60999) and differ
# from every other integration test's.
MRPC=29271 MHTTP=19223
ARPC=12745 BRPC=12746 CRPC=12747 DRPC=12748  # derived HTTP: 9480, 9481 (A, B)
AHTTP=9480 BHTTP=9481 CHTTP=19293
M="http://127.0.0.1:$MHTTP"
spawn master "$BIN/mooncake_master" --deployment_mode P2P --rpc_port $MRPC --metrics_port $MHTTP \
  --http_host 127.0.0.1 --client_ttl 3000 --client_drop_ttl 60000
wait_port 127.0.0.1 $MHTTP 20 || exit 1
TIERS='{"tiers":[{"type":"DRAM","capacity":67108864,"priority":100}]}'
spec_node() {  # spec_node NAME TE_PORT RPC_PORT EXTRA...: the spec's launch command
  local name=$1 te=$2 rpc=$3; shift 3
  spawn "$name" "$BIN/mooncake_client" --master_server_address "127.0.0.1:$MRPC" --port "$te" \
    --client_rpc_port "$rpc" --deployment_mode P2P --tiered_backend_config "$TIERS" "$@"
}
spec_node a 29272 $ARPC
spec_node b 29273 $BRPC
B_PID=$LAST_PID
spec_node c 29274 $CRPC --http_port $CHTTP  # an explicit --http_port wins
spec_node d 29275 $DRPC --http_port 0       # 0 = HTTP off: nothing registered
check "A serves /health on its derived port $AHTTP" wait_for 20 "${C[@]}" -f "http://127.0.0.1:$AHTTP/health"
check "B serves /health on its derived port $BHTTP" wait_for 20 "${C[@]}" -f "http://127.0.0.1:$BHTTP/health"
check "C serves /health on its explicit --http_port $CHTTP" wait_for 20 "${C[@]}" -f "http://127.0.0.1:$CHTTP/health"
check "A logs its derived HTTP port" grep -q "mooncake_client: HTTP on 0.0.0.0:$AHTTP (derived from client_rpc_port)" a.log
check "C logs its explicit HTTP port" grep -q "mooncake_client: HTTP on 0.0.0.0:$CHTTP (--http_port)" c.log
check "no node reports HTTP off" bash -c "! grep -l 'HTTP off' a.log b.log c.log"

clients_json() { "${C[@]}" -f "$M/clients"; }
http_of() {  # http_of RPC_PORT -> the registered http_endpoint of that node
  clients_json | jq -r --arg rpc "127.0.0.1:$1" '.clients[] | select(.rpc_endpoint == $rpc) | .http_endpoint'
}
check "the master knows all four nodes" wait_for 20 bash -c "[[ \$(curl -sS '$M/clients' | jq '.clients | length') == 4 ]]"
check "/clients names A's HTTP endpoint" test "$(http_of $ARPC)" = "127.0.0.1:$AHTTP"
check "/clients names B's HTTP endpoint" test "$(http_of $BRPC)" = "127.0.0.1:$BHTTP"
check "/clients names C's explicit HTTP endpoint" test "$(http_of $CRPC)" = "127.0.0.1:$CHTTP"
check "/clients has an empty HTTP endpoint for D (HTTP off)" test "$(http_of $DRPC)" = ""
check "mooncake_cli clients shows both derived HTTP endpoints" bash -c "
  out=\$('$BIN/mooncake_cli' --master_server_address 127.0.0.1:$MRPC clients) &&
  grep -q ' http ' <<<\"\$out\" && grep -q '127.0.0.1:$AHTTP' <<<\"\$out\" && grep -q '127.0.0.1:$BHTTP' <<<\"\$out\""

sd() { "${C[@]}" -f "$M/prometheus/targets"; }
targets() { sd | jq -r '[.[].targets[]] | sort | join(",")'; }
want="127.0.0.1:$MHTTP,127.0.0.1:$CHTTP,127.0.0.1:$AHTTP,127.0.0.1:$BHTTP"
want=$(tr , '\n' <<<"$want" | sort | paste -sd,)
# The listing follows health (a 3 s TTL): on a loaded host a heartbeat can be
# late and a node briefly absent, so each listing check waits until it holds.
targets_are() { test "$(targets)" = "$1"; }
check "/prometheus/targets lists the master and every node with HTTP (A, B, C), not D" wait_for 20 targets_are "$want"
check "...as HTTP SD JSON: target groups with string labels (role, client id)" wait_for 20 bash -c "
  curl -sS '$M/prometheus/targets' | jq -e '
    all(.[]; (.targets | type) == \"array\" and (.labels | to_entries | all(.value | type == \"string\"))) and
    ([.[] | select(.labels.mc_role == \"master\")] | length) == 1 and
    ([.[] | select(.labels.mc_role == \"client\") | .labels.mc_client_id] | length) == 3' >/dev/null"
check "every listed target serves Prometheus metrics" bash -c "
  for t in \$(curl -sS '$M/prometheus/targets' | jq -r '.[].targets[]'); do
    curl -sS -f --max-time 20 \"http://\$t/metrics\" | grep '^mc_process_uptime_seconds ' >/dev/null || exit 1
  done"
check "/prometheus/targets refuses POST" test "$("${C[@]}" -o /dev/null -w '%{http_code}' -X POST "$M/prometheus/targets")" = 405
if [[ -n "$PROMTOOL" ]]; then
  cat >prometheus.yml <<YML
scrape_configs:
  - job_name: mooncake
    http_sd_configs:
      - url: $M/prometheus/targets
        refresh_interval: 30s
YML
  check "promtool accepts a prometheus.yml with http_sd_configs pointing at the master" "$PROMTOOL" check config prometheus.yml
else
  echo "promtool missing (apt install prometheus): config not validated"
fi

# A node that stops heartbeating leaves the service discovery once it is no longer healthy.
kill -STOP "$B_PID"
check "B leaves /prometheus/targets once its heartbeats stop" \
  wait_for 20 bash -c "! curl -sS -f '$M/prometheus/targets' | grep '127.0.0.1:$BHTTP' >/dev/null"
check "...while A stays" wait_for 20 bash -c "curl -sS -f '$M/prometheus/targets' | grep '127.0.0.1:$AHTTP' >/dev/null"
kill -CONT "$B_PID"
finish
