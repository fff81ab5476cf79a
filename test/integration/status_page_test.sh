#!/usr/bin/env bash
# The master's status page in a real browser (Debian's headless chromium):
# against a master and two nodes, the page's scripts render every node (with
# health, usage and a link to its HTTP endpoint); after a put the page shows
# the new usage; a screenshot (docs/status-page.png when STATUS_PAGE_SHOT is
# set). With an auth token: / and /status are public, /status.json and
# /clients need the token, and the page asks for it. Skips (77) without
# chromium or curl. Budgets are generous: no timed assertion, the DOM is
# polled until it shows what is expected (a loaded 2-core machine).
BIN=${1:?usage: status_page_test.sh BUILD/apps}
source "$(dirname "$0")/lib.sh"
trap cleanup EXIT
cd "$WORK"
command -v curl >/dev/null || { echo "curl missing: skip"; exit 77; }
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[[ -n "$CHROMIUM" ]] || { echo "chromium missing (scripts/install-deps.sh installs it): skip"; exit 77; }

# Fixed ports below the ephemeral range (see http_test.sh), distinct from the other scripts.
MRPC=29451 MHTTP=19403 AHTTP=19481 BHTTP=19482
M="http://127.0.0.1:$MHTTP"
C=(curl -sS --max-time 20)

# browser URL OUT [--screenshot=PATH] : the DOM after the page's scripts ran for
# 6 s of virtual time (4 polls; network waits do not count), written to OUT.
# Root needs --no-sandbox; a fresh profile each time.
browser() {
  local url=$1 out=$2; shift 2
  local profile
  profile=$(mktemp -d "$WORK/chromium.XXXXXX")
  timeout -k 5 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --user-data-dir="$profile" --window-size=1100,620 --hide-scrollbars --virtual-time-budget=6000 "$@" \
    --dump-dom "$url" >"$out" 2>>"$WORK/chromium.log"
}
# live URL SECONDS DOM_OUT [PNG_OUT] : the page open for SECONDS of real time
# (so that it samples rates), then its DOM (and a screenshot). chromium is
# driven over --remote-debugging-pipe (fds 3/4, NUL-separated CDP JSON) by
# python3's standard library: no websocket client needed.
cat >cdp.py <<'PY'
import json, os, subprocess, sys, time, base64
chromium, url, secs, dom_out, png_out, profile = sys.argv[1:7]
to_r, to_w = os.pipe()
from_r, from_w = os.pipe()
def child():  # chromium reads commands on fd 3 and writes answers on fd 4
    a, b = os.dup(to_r), os.dup(from_w)
    os.dup2(a, 3); os.dup2(b, 4)
proc = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--no-first-run", "--user-data-dir=" + profile, "--window-size=760,420", "--hide-scrollbars",
                         "--remote-debugging-pipe", "about:blank"],
                        preexec_fn=child, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=sys.stderr)
os.close(to_r); os.close(from_w)
buf, last = b"", 0
def call(method, params=None, session=None):
    global buf, last
    last += 1
    msg = {"id": last, "method": method, "params": params or {}}
    if session: msg["sessionId"] = session
    os.write(to_w, json.dumps(msg).encode() + b"\0")
    while True:
        while b"\0" not in buf:
            chunk = os.read(from_r, 1 << 20)
            if not chunk: sys.exit("chromium closed the debugging pipe")
            buf += chunk
        raw, buf = buf.split(b"\0", 1)
        m = json.loads(raw)
        if m.get("id") == last:
            if "error" in m: sys.exit(method + ": " + json.dumps(m["error"]))
            return m["result"]
try:
    target = call("Target.createTarget", {"url": url})["targetId"]
    sid = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    time.sleep(float(secs))
    html = call("Runtime.evaluate", {"expression": "document.documentElement.outerHTML", "returnByValue": True}, sid)
    open(dom_out, "w").write(html["result"]["value"])
    if png_out:
        open(png_out, "wb").write(base64.b64decode(call("Page.captureScreenshot", {"format": "png"}, sid)["data"]))
    call("Browser.close")
    proc.wait(timeout=30)
finally:
    if proc.poll() is None: proc.kill(); proc.wait()
PY
live() {
  local profile
  profile=$(mktemp -d "$WORK/chromium.XXXXXX")
  timeout -k 5 $(($2 + 90)) python3 cdp.py "$CHROMIUM" "$1" "$2" "$3" "${4:-}" "$profile" 2>>"$WORK/chromium.log"
}
# dom_has URL PATTERN... : the rendered DOM matches every extended regex PATTERN.
dom_has() {
  local url=$1; shift
  browser "$url" dom.html || return 1
  for p in "$@"; do grep -Eq -- "$p" dom.html || return 1; done
}

spawn master "$BIN/mooncake_master" --rpc_port $MRPC --metrics_port $MHTTP --http_host 127.0.0.1 --client_ttl 1000 \
  --client_drop_ttl 5000
wait_port 127.0.0.1 $MHTTP 20 || exit 1
node() { spawn_client "$1" $MRPC "$2" "$3" "$4" 64MiB "${@:5}"; }  # node NAME TE_PORT RPC_PORT HTTP_PORT EXTRA...
node a 29452 12745 $AHTTP
node b 29453 12746 $BHTTP
B_PID=$LAST_PID
check "client A registers" wait_for 30 "${C[@]}" -f "http://127.0.0.1:$AHTTP/health"
check "client B registers" wait_for 30 "${C[@]}" -f "http://127.0.0.1:$BHTTP/health"
A_ID=$("${C[@]}" "http://127.0.0.1:$AHTTP/stats" | sed -n 's/.*"client_id":"\([^"]*\)".*/\1/p')
B_ID=$("${C[@]}" "http://127.0.0.1:$BHTTP/stats" | sed -n 's/.*"client_id":"\([^"]*\)".*/\1/p')
check "the nodes report their ids ($A_ID, $B_ID)" test -n "$A_ID" -a -n "$B_ID" -a "$A_ID" != "$B_ID"

# --- the page and its JSON over plain HTTP
ctype() { "${C[@]}" -o /dev/null -w '%{http_code} %{content_type}' "$@"; }
check "/ and /status are HTML" bash -c "[[ '$(ctype "$M/")' == '200 text/html'* && '$(ctype "$M/status")' == '200 text/html'* ]]"
check "the page loads nothing from elsewhere (no src=/href= to http(s)://, no @import)" \
  bash -c "! ${C[*]} '$M/' | grep -Eiq '(src|href)=\"?(https?:)?//|@import'"
check "an unknown path is still 404" test "$("${C[@]}" -o /dev/null -w '%{http_code}' "$M/nope")" = 404
check "POST / is 405" test "$("${C[@]}" -o /dev/null -w '%{http_code}' -X POST "$M/")" = 405
json_stats_ok() {  # both nodes in /status.json with their fetched /stats
  local j
  j=$("${C[@]}" -f "$M/status.json") || return 1
  python3 -c '
import json, sys
d = json.loads(sys.argv[1]); ids = set(sys.argv[2:])
got = {n["client_id"]: n for n in d["nodes"]}
sys.exit(0 if ids <= set(got) and all(got[i]["stats"] is not None and got[i]["http_endpoint"] for i in ids) else 1)
' "$j" "$A_ID" "$B_ID"
}
check "/status.json lists both nodes with their /stats" wait_for 30 json_stats_ok
check "/clients links each node's HTTP server (http_url)" \
  bash -c "${C[*]} '$M/clients' | grep -q '\"http_url\":\"http://127.0.0.1:$AHTTP/\"'"

# --- in the browser: every node, its health and link, after the page's scripts ran
T0=$SECONDS
check "chromium renders both nodes, healthy, with links to their HTTP endpoints" wait_for 120 dom_has "$M/" \
  "data-client-id=\"$A_ID\"" "data-client-id=\"$B_ID\"" 'data-health="healthy"' \
  "href=\"http://127.0.0.1:$AHTTP/stats\"" "href=\"http://127.0.0.1:$BHTTP/stats\"" 'data-updates="[1-9]'
echo "     (first render check: $((SECONDS - T0)) s)"
check "/status serves the same page" wait_for 60 dom_has "$M/status" "data-client-id=\"$A_ID\""
check "no put yet: the page shows 0 keys on A" dom_has "$M/" "data-client-id=\"$A_ID\"[^>]*data-keys=\"0\""

# --- a put through A's /kv: the page shows the new usage (keys and used bytes from the heartbeat)
random_file v1 1000003
check "PUT /kv on A" "${C[@]}" -f -o /dev/null -X PUT --data-binary @v1 "http://127.0.0.1:$AHTTP/kv/status-page-key"
used_shown() {  # the page shows A with one key and at least the value's bytes used
  browser "$M/" dom.html || return 1
  local tag used
  tag=$(grep -Eo "<div class=\"node\" data-client-id=\"$A_ID\"[^>]*>" dom.html) || return 1
  [[ $tag == *'data-keys="1"'* ]] || return 1
  used=$(sed -n 's/.*data-used="\([0-9]*\)".*/\1/p' <<<"$tag")
  ((${used:-0} >= 1000003))
}
check "after the put the page shows A's new usage (1 key, >= 1000003 bytes)" wait_for 120 used_shown
check "the page's totals show the key" grep -q 'data-keys="1"' dom.html

# --- rates over real time: gets of the key through B (remote reads from A) while the page samples
gets_loop() {  # remote hits on B, local hits on A
  while :; do
    curl -s --max-time 20 -o /dev/null "http://127.0.0.1:$BHTTP/kv/status-page-key"
    curl -s --max-time 20 -o /dev/null "http://127.0.0.1:$AHTTP/kv/status-page-key"
    sleep 0.05
  done
}
gets_loop &
LOOP=$!
PIDS+=("$LOOP")
# Peaks over the page's ring buffers; the transfer is initiated by the holder
# (A), the gets are B's. Longer for the README's screenshot (fuller charts).
charted() {
  live "$M/" "$([[ -n ${STATUS_PAGE_SHOT:-} ]] && echo 45 || echo 12)" live.html "$WORK/shot.png" || return 1
  local a b
  a=$(grep -Eo "<div class=\"node\" data-client-id=\"$A_ID\"[^>]*>" live.html) || return 1
  b=$(grep -Eo "<div class=\"node\" data-client-id=\"$B_ID\"[^>]*>" live.html) || return 1
  [[ $b =~ data-gets-peak=\"([0-9.]+)\" ]] && [[ ${BASH_REMATCH[1]} != 0.00 ]] || return 1
  [[ $a =~ data-xfer-peak=\"([0-9]+)\" ]] && ((BASH_REMATCH[1] > 0))
}
check "over real time the page charts B's gets/s and A's transfer/s (remote gets through B)" wait_for 240 charted
kill "$LOOP" 2>/dev/null; wait "$LOOP" 2>/dev/null
check "the screenshot is a PNG" bash -c "head -c 8 '$WORK/shot.png' | od -An -c | grep -q 'P   N   G'"
if [[ -n "${STATUS_PAGE_SHOT:-}" ]]; then  # the README's screenshot (docs/status-page.png)
  cp "$WORK/shot.png" "$STATUS_PAGE_SHOT" && echo "     screenshot: $STATUS_PAGE_SHOT"
fi
# --- a frozen node: its /stats times out (the master's fetch is bounded), its
# heartbeats stop; the page keeps answering and shows it as no longer healthy.
kill -STOP "$B_PID"
b_frozen() {
  "${C[@]}" -f "$M/status.json" | python3 -c '
import json, sys
n = {x["client_id"]: x for x in json.load(sys.stdin)["nodes"]}
a, b = n.get(sys.argv[1]), n.get(sys.argv[2])
sys.exit(0 if a and a["stats"] and (b is None or (b["health"] != "healthy" and b["stats"] is None)) else 1)
' "$A_ID" "$B_ID"
}
check "B frozen (SIGSTOP): /status.json still answers, A with stats, B unhealthy without" wait_for 60 b_frozen
page_b_down() {
  dom_has "$M/" "data-client-id=\"$A_ID\" data-health=\"healthy\"" 'data-updates="[1-9]' || return 1
  ! grep -q "data-client-id=\"$B_ID\" data-health=\"healthy\"" dom.html
}
check "B frozen: the page shows B as suspect or dead (or gone), A healthy" wait_for 60 page_b_down
kill -CONT "$B_PID"
KEEP_WORK=1 cleanup  # stops these nodes, keeps $WORK

# --- auth on: the page is public, its data is not
TOK="tok-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
MC_AUTH_TOKEN="$TOK" spawn master "$BIN/mooncake_master" --rpc_port $MRPC --metrics_port $MHTTP --http_host 127.0.0.1
wait_port 127.0.0.1 $MHTTP 20 || exit 1
MC_AUTH_TOKEN="$TOK" node a 29452 12745 $AHTTP
code() { "${C[@]}" -o /dev/null -w '%{http_code}' "$@"; }
check "auth on: / and /status answer without a token" bash -c "test $(code "$M/") = 200 && test $(code "$M/status") = 200"
check "auth on: /status.json, /clients and an unknown path need the token (401)" \
  bash -c "test $(code "$M/status.json") = 401 && test $(code "$M/clients") = 401 && test $(code "$M/nope") = 401"
a_with_stats() {  # with the token: A listed, its /stats fetched by the master with the master's token
  "${C[@]}" -f -H "Authorization: Bearer $TOK" "$M/status.json" | grep -q '"stats":{"local_hits"'
}
check "auth on: /status.json with the token lists A with its /stats" wait_for 30 a_with_stats
check "auth on: the page in chromium asks for the token and says what is public" \
  wait_for 60 dom_has "$M/" 'id="err">token needed<' 'the page is public'
finish
