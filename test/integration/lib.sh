# Shared helpers of the integration scripts (sourced). Every process started
# through `spawn` is recorded and killed by `cleanup` (by PID, never by name).
set -uo pipefail
BIN=${BIN:?BIN must point at the apps directory of a build}
BIN=$(cd "$BIN" && pwd)
WORK=$(mktemp -d /tmp/mc-it.XXXXXX)
PIDS=()
FAILS=0
PASSES=0

cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill -CONT "$p" 2>/dev/null; done
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill -TERM "$p" 2>/dev/null; done
  local deadline=$((SECONDS + 10))
  for p in "${PIDS[@]:-}"; do
    [[ -n "$p" ]] || continue
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  PIDS=()
  [[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"
}

# spawn NAME CMD... : starts CMD in the background, logs to $WORK/NAME.log; sets LAST_PID.
spawn() {
  local name=$1; shift
  "$@" >"$WORK/$name.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# spawn_client NAME MASTER_RPC_PORT TE_PORT RPC_PORT HTTP_PORT DRAM_CAPACITY EXTRA... : a
# mooncake_client of the master at 127.0.0.1:MASTER_RPC_PORT, HTTP on 127.0.0.1, heartbeats
# every 200 ms, one DRAM tier of DRAM_CAPACITY (e.g. 64MiB); EXTRA flags appended. Sets LAST_PID.
spawn_client() {
  local name=$1 mrpc=$2 te=$3 rpc=$4 http=$5 dram=$6; shift 6
  spawn "$name" "$BIN/mooncake_client" --master_server_address "127.0.0.1:$mrpc" --port "$te" --client_rpc_port "$rpc" \
    --http_port "$http" --http_host 127.0.0.1 --heartbeat_interval 200ms \
    --tiered_backend_config "{\"tiers\":[{\"type\":\"DRAM\",\"capacity\":\"$dram\",\"priority\":100}]}" "$@"
}

# wait_port HOST PORT SECONDS [NETNS]
wait_port() {
  local host=$1 port=$2 secs=$3 ns=${4:-}
  local deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    if [[ -n "$ns" ]]; then
      ip netns exec "$ns" bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null && return 0
    else
      (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && return 0
    fi
    sleep 0.05
  done
  echo "timed out waiting for $host:$port" >&2
  # What the processes said (a port taken by another socket, a crash, ...).
  dump_logs >&2
  return 1
}

# wait_for SECONDS CMD... : retries CMD until it succeeds.
wait_for() {
  local secs=$1; shift
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# check "description" CMD... : runs CMD, prints ok/FAIL with the seconds since the
# script started and the step's own seconds; a FAIL also prints the last lines of
# every process log and of err.txt, so a failure in CI can be read from its output.
check() {
  local what=$1; shift
  local t0=$EPOCHREALTIME
  if "$@"; then
    PASSES=$((PASSES + 1)); echo "ok   - $what [$(elapsed_since "$t0")]"
  else
    FAILS=$((FAILS + 1)); echo "FAIL - $what [$(elapsed_since "$t0")]"
    dump_logs
  fi
}

START_TIME=$EPOCHREALTIME
elapsed_since() {  # "at T s, took D s" with T since the script started
  awk -v s="$START_TIME" -v t="$1" -v n="$EPOCHREALTIME" 'BEGIN { printf "at %.1f s, took %.1f s", n - s, n - t }'
}

dump_logs() {  # the last lines of every process log and of err.txt in $WORK
  local f
  for f in "$WORK"/*.log "$WORK"/err.txt; do
    [[ -f $f ]] || continue
    echo "  --- ${f##*/} (last lines)"
    tail -n 15 "$f" | sed 's/^/  | /'
  done
}

finish() {
  echo "$PASSES passed, $FAILS failed"
  ((FAILS == 0))
}

random_file() {  # random_file PATH BYTES
  head -c "$2" /dev/urandom >"$1"
}
