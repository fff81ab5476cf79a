#!/usr/bin/env bash
# The shared secret end to end (README "Security model"): a master and two
# clients started with a token from the environment, a file flag and a TOML
# file; RPC (registration, peer reads), HTTP (401 without the bearer token,
# /metrics and /health open) and the CLI (works with the token; without it or
# with a wrong one: ACCESS_DENIED, exit 1); the token never in /proc/PID/cmdline;
# refusals counted in mc_auth_failures_total.
BIN=${1:?usage: auth_test.sh BUILD/apps}
source "$(dirname "$0")/lib.sh"
trap cleanup EXIT
cd "$WORK"
command -v curl >/dev/null || { echo "curl missing: skip"; exit 77; }

# Fixed ports below the ephemeral range (see http_test.sh), distinct from the other scripts.
MRPC=29351 MHTTP=19303 AHTTP=19381 BHTTP=19382 CHTTP=19383
M="http://127.0.0.1:$MHTTP" A="http://127.0.0.1:$AHTTP" B="http://127.0.0.1:$BHTTP"
C=(curl -sS --max-time 20)
TOK="tok-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
TOK_NEXT="next-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
umask 077
printf '%s\n' "$TOK" >token          # mode 0600, trailing newline trimmed by the readers
printf '%s\n' "$TOK_NEXT" >token_next
printf 'auth_token_file = "%s"\n' "$WORK/token" >b.toml
AUTH=(-H "Authorization: Bearer $TOK")

# Master: the token list through the environment (current + the next one: rotation).
MC_AUTH_TOKEN="$TOK,$TOK_NEXT" spawn master "$BIN/mooncake_master" --rpc_port $MRPC --metrics_port $MHTTP \
  --http_host 127.0.0.1 --client_ttl 1000 --client_drop_ttl 5000
MASTER=$LAST_PID
wait_port 127.0.0.1 $MHTTP 20 || exit 1
node() { spawn_client "$1" $MRPC "$2" "$3" "$4" 64MiB "${@:5}"; }  # node NAME TE_PORT RPC_PORT HTTP_PORT EXTRA...
node a 29352 12645 $AHTTP --auth_token_file "$WORK/token"   # the file on the command line
A_PID=$LAST_PID
node b 29353 12646 $BHTTP --config "$WORK/b.toml"            # the file from TOML
B_PID=$LAST_PID
node c 29354 12647 $CHTTP                                    # no token: refused by the master
check "client A registers with the master (token from --auth_token_file)" wait_for 20 "${C[@]}" -f "$A/health"
check "client B registers with the master (token from TOML auth_token_file)" wait_for 20 "${C[@]}" -f "$B/health"
check "client C without a token is refused: 'access denied' in its log" \
  wait_for 10 grep -qi "access denied" "$WORK/c.log"
c_not_registered() { "${C[@]}" "http://127.0.0.1:$CHTTP/health" | grep -q not_registered; }
check "client C is not registered (/health 503 not_registered)" wait_for 10 c_not_registered

no_token_in_cmdline() {  # PID
  ! tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$TOK" && ! tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$TOK_NEXT"
}
check "the token is not in the master's /proc/PID/cmdline (environment)" no_token_in_cmdline $MASTER
check "the token is not in A's /proc/PID/cmdline (file flag)" no_token_in_cmdline $A_PID
check "the token is not in B's /proc/PID/cmdline (TOML)" no_token_in_cmdline $B_PID

# --- HTTP
status() { "${C[@]}" -o /dev/null -w '%{http_code}' "$@"; }
check "/metrics and /health answer without a token" \
  bash -c "test $(status "$M/metrics") = 200 && test $(status "$A/metrics") = 200 && test $(status "$M/health") = 200"
check "master /clients, /keys, /key/ without a token: 401" \
  bash -c "test $(status "$M/clients") = 401 && test $(status "$M/keys") = 401 && test $(status "$M/key/x") = 401"
check "master /clients with a wrong token: 401" test "$(status -H 'Authorization: Bearer nope' "$M/clients")" = 401
check "master /clients with the token: 200, two clients" \
  bash -c "${C[*]} -f ${AUTH[*]@Q} '$M/clients' | grep -o client_id | wc -l | grep -qx 2"
check "master /clients with the rotation token: 200" test "$(status -H "Authorization: Bearer $TOK_NEXT" "$M/clients")" = 200
random_file v1 100003
check "PUT /kv without a token: 401, nothing stored" \
  bash -c "test $(status -X PUT --data-binary @v1 "$A/kv/k0") = 401 && test $(status "${AUTH[@]}" "$A/kv/k0") = 404"
check "GET /stats and DELETE /kv without a token: 401" \
  bash -c "test $(status "$A/stats") = 401 && test $(status -X DELETE "$A/kv/k0") = 401"
check "401 bodies are JSON ACCESS_DENIED" bash -c "${C[*]} '$A/stats' | grep -q '\"error\":\"ACCESS_DENIED\"'"
check "PUT /kv/k1 on A with the token" bash -c "${C[*]} -f ${AUTH[*]@Q} -X PUT --data-binary @v1 '$A/kv/k1' | grep -q '\"size\":100003'"
check "GET /kv/k1 on B (a peer read B -> A over authenticated RPC)" \
  bash -c "${C[*]} -f ${AUTH[*]@Q} '$B/kv/k1' -o got1 && cmp -s v1 got1"

# --- CLI
CLI=("$BIN/mooncake_cli" --master_server_address 127.0.0.1:$MRPC)
check "CLI with --auth_token_file: get returns the value" \
  bash -c "$(printf '%q ' "${CLI[@]}") --auth_token_file '$WORK/token' get k1 cli1 && cmp -s v1 cli1"
random_file v2 7777
check "CLI with MC_AUTH_TOKEN_FILE: put then get round trip" bash -c "
  MC_AUTH_TOKEN_FILE='$WORK/token' $(printf '%q ' "${CLI[@]}") put k2 v2 &&
  MC_AUTH_TOKEN_FILE='$WORK/token' $(printf '%q ' "${CLI[@]}") get k2 cli2 && cmp -s v2 cli2"
check "CLI with the master's rotation token (env): clients works" \
  bash -c "MC_AUTH_TOKEN='$TOK_NEXT' $(printf '%q ' "${CLI[@]}") clients | grep -q healthy"
cli_denied() {  # cli_denied ENV... -- ARGS : exit 1 and ACCESS_DENIED on stderr
  local envs=() ; while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  env -u MC_AUTH_TOKEN -u MC_AUTH_TOKEN_FILE "${envs[@]}" "${CLI[@]}" "$@" >cli.out 2>cli.err
  local rc=$?
  [[ $rc -eq 1 ]] && grep -q ACCESS_DENIED cli.err || { echo "rc=$rc"; cat cli.err; return 1; }
}
check "CLI without a token: ACCESS_DENIED, exit 1" cli_denied -- get k1 out
check "CLI with a wrong token (env): ACCESS_DENIED, exit 1" cli_denied MC_AUTH_TOKEN=wrong-token -- stat k1
printf 'bad-token\n' >bad
check "CLI with a wrong token file: ACCESS_DENIED, exit 1" cli_denied -- --auth_token_file "$WORK/bad" clients
: >empty
"${CLI[@]}" --auth_token_file "$WORK/empty" clients >/dev/null 2>empty.err
check "CLI with an empty token file: startup error, exit 2" test $? -eq 2
big=$(head -c 300 /dev/zero | tr '\0' x)
"${CLI[@]}" --auth_token "$big" clients >/dev/null 2>big.err
check "CLI with an oversize token: startup error, exit 2" test $? -eq 2
check "...and the error does not echo the token" bash -c "! grep -q xxxxxxxx big.err"
cp token open && chmod 640 open
"${CLI[@]}" --auth_token_file "$WORK/open" clients >/dev/null 2>open.err
check "a group-readable token file works and is warned about" \
  bash -c "test $? -eq 0 && grep -q 'warning: auth_token_file' open.err"

# --- Counters
metric() {  # metric URL 'name{labels}'
  "${C[@]}" "$1/metrics" | awk -v n="$2" 'index($0, n) == 1 { s += $NF } END { printf "%.0f\n", s + 0 }'
}
check "master counts refused RPC connections (C + CLIs)" test "$(metric "$M" 'mc_auth_failures_total{surface="rpc"}')" -ge 3
check "master counts refused HTTP requests" test "$(metric "$M" 'mc_auth_failures_total{surface="http"}')" -ge 4
check "client A counts refused HTTP requests" test "$(metric "$A" 'mc_auth_failures_total{surface="http"}')" -ge 4
check "client A exports the RPC refusal counter" bash -c "${C[*]} '$A/metrics' | grep -q '^mc_auth_failures_total{surface=\"rpc\"} '"
finish
