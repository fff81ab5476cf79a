#!/usr/bin/env bash
# The Grafana dashboard (conf/grafana/mooncake-p2p.json) against real data:
# Grafana is not packaged in Debian, so Debian's Prometheus scrapes a live
# cluster (a master and two nodes on 127.0.0.1, found through the master's
# HTTP service discovery /prometheus/targets) after some puts, local and
# remote gets, a get of a missing key and remote writes; then every expr of every panel (and
# every template variable's label_values query) runs through Prometheus' HTTP
# API and must succeed with a non-empty result; the panels that show the
# workload must show it (a value > 0). The dashboard's structure is checked
# too: titles, unique ids, gridPos, datasource refs, variables.
BIN=${1:?usage: grafana_test.sh BUILD/apps DASHBOARD_JSON}
DASH=${2:?usage: grafana_test.sh BUILD/apps DASHBOARD_JSON}
DASH=$(cd "$(dirname "$DASH")" && pwd)/$(basename "$DASH")
source "$(dirname "$0")/lib.sh"
trap cleanup EXIT
cd "$WORK"
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}
PY=/usr/bin/python3
[[ -x "$PROMETHEUS" ]] || { echo "prometheus missing (apt install prometheus): skip"; exit 77; }
[[ -x "$PY" ]] || { echo "python3 missing: skip"; exit 77; }
command -v curl >/dev/null || { echo "curl missing: skip"; exit 77; }
C=(curl -sS --max-time 20)

# Fixed ports below the kernel's ephemeral range, distinct from the other integration tests'.
MRPC=29371 MHTTP=19423 AHTTP=19481 BHTTP=19482 PPORT=19490
M="http://127.0.0.1:$MHTTP" A="http://127.0.0.1:$AHTTP" B="http://127.0.0.1:$BHTTP" P="http://127.0.0.1:$PPORT"
spawn master "$BIN/mooncake_master" --deployment_mode P2P --rpc_port $MRPC --metrics_port $MHTTP --http_host 127.0.0.1
wait_port 127.0.0.1 $MHTTP 20 || exit 1
spawn_client a $MRPC 29372 12845 $AHTTP 64MiB
spawn_client b $MRPC 29373 12846 $BHTTP 64MiB
check "both nodes serve /health" wait_for 20 bash -c "curl -sf '$A/health' && curl -sf '$B/health'"
check "the master's service discovery lists itself and both nodes" wait_for 20 bash -c \
  "[[ \$(curl -sf '$M/prometheus/targets' | grep -o '\"targets\":\[\"[^\"]*\"' | sort -u | wc -l) == 3 ]]"

# The workload (round TAG): values of odd sizes put on A (local) and on B
# through the CLI (a remote write B serves), read back on B (remote hits, from
# A) and on A (local hits), a CLI get (a remote read B serves), and a get of a
# missing key (GET /kv asks the master for the size first: no get() runs, so no
# miss is counted; misses stay 0 here). A node creates a method's RPC series
# at its first call and rate() sees no increase in a series' first sample: a
# warm-up round runs before Prometheus starts, the measured one after its
# first scrapes.
sizes=(4113 20497 65537 200003 1048583)  # inline reads (<= 64 KiB) and transfer-engine reads
workload() {
  local tag=$1 ok=1 i
  for i in 1 2 3 4 5; do
    random_file "$tag-v$i" "${sizes[i - 1]}"
    "${C[@]}" -f -X PUT --data-binary "@$tag-v$i" "$A/kv/$tag-g$i" >/dev/null || ok=0
    "${C[@]}" -f "$B/kv/$tag-g$i" -o "$tag-r$i" && cmp -s "$tag-v$i" "$tag-r$i" || ok=0
    "${C[@]}" -f "$A/kv/$tag-g$i" -o "$tag-l$i" && cmp -s "$tag-v$i" "$tag-l$i" || ok=0
  done
  check "$tag: puts on A, remote gets on B and local gets on A round-trip" test $ok = 1
  check "$tag: a get of a missing key is a 404" \
    test "$("${C[@]}" -o /dev/null -w '%{http_code}' "$B/kv/none-$tag")" = 404
  random_file "$tag-w" 70001
  check "$tag: mooncake_cli put --target B (a remote write B serves)" \
    "$BIN/mooncake_cli" --master_server_address 127.0.0.1:$MRPC put --target 127.0.0.1:12846 "$tag-gw" "$tag-w"
  check "$tag: mooncake_cli get of B's value round-trips" bash -c \
    "'$BIN/mooncake_cli' --master_server_address 127.0.0.1:$MRPC get $tag-gw $tag-got && cmp -s $tag-w $tag-got"
}
workload warmup >/dev/null 2>&1  # checked in the measured round

# Prometheus: 1 s scrapes of whatever the master's HTTP SD lists; storage in $WORK.
cat >prometheus.yml <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: mooncake
    http_sd_configs:
      - url: $M/prometheus/targets
        refresh_interval: 1s
YML
spawn prometheus "$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address=127.0.0.1:$PPORT --storage.tsdb.retention.time=1h
PROM_PID=$LAST_PID
# scalar VALUE of an instant query (empty when there is no result).
value() {
  "${C[@]}" -G "$P/api/v1/query" --data-urlencode "query=$1" |
    "$PY" -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
have() { [[ "$(value "$1")" == "$2" ]]; }  # have QUERY VALUE
nonempty() { [[ -n "$(value "$1")" ]]; }
ready() { "${C[@]}" -f "$P/-/ready" >/dev/null && kill -0 "$PROM_PID"; }
check "Prometheus is ready" wait_for 40 ready
ready || { tail -20 prometheus.log; finish; exit 1; }
# Every target up, and both nodes scraped (a sample before the workload, so that rates see it).
check "Prometheus scrapes the master and both nodes (up == 1)" wait_for 40 have 'count(up{job="mooncake"} == 1)' 3
check "...with the service discovery labels (mc_role)" \
  have 'count(mc_process_uptime_seconds{mc_role="client"}) + count(mc_process_uptime_seconds{mc_role="master"})' 3
# Baselines (scraped after the warm-up), then the measured round; polls until
# Prometheus holds its last effects on both nodes.
RHIT='sum(mc_client_gets_total{result="remote_hit"})' LHIT='sum(mc_client_gets_total{result="local_hit"})'
WRITES='sum(mc_store_remote_writes_total)' READS='sum(mc_store_remote_reads_total)'
base=()
for q in "$RHIT" "$LHIT" "$WRITES" "$READS"; do base+=("$(value "$q")"); done
check "baselines of the workload's counters" test -n "${base[0]}" -a -n "${base[1]}" -a -n "${base[2]}" -a -n "${base[3]}"
workload measured
check "Prometheus sees the workload" wait_for 40 nonempty \
  "$RHIT >= ${base[0]:-0} + 5 and $LHIT >= ${base[1]:-0} + 5 and $WRITES > ${base[2]:-0} and $READS > ${base[3]:-0}"
# Queries run at this instant, with a rate window that reaches back before the workload.
AT=$(date +%s.%N)

# Panels whose result must include a value > 0 with this workload.
cat >positive.txt <<'EOF'
Clients healthy
Keys
Replicas
Cluster capacity
Cluster used
Clients by health
Keys and replicas
Tier usage
Used bytes per tier
Capacity per tier
Values per tier
Process memory
Gets by result
Hit ratio per node
Gets per node
Remote operations served
Remote bytes served
Remote reads issued
Remote read bytes issued
Remote RPCs by method
Remote read latency (p50, p99)
Remote write latency (p50, p99)
Mean RPC latency by method
Master call latency (p99)
Served batch time per stage (mean)
RPC calls by method
Transfer bytes by transport
Transfer operations by transport
Transfer bytes per node
Transfer connections and regions
EOF
"$PY" - "$DASH" "$P" "$AT" positive.txt <<'PYEOF'
import json, math, sys, urllib.parse, urllib.request
dash_path, prom, at, positive_path = sys.argv[1:5]
fails = 0
def report(ok, what):
    global fails
    print(("ok   - " if ok else "FAIL - ") + what)
    if not ok: fails += 1

dash = json.load(open(dash_path))
positive = {l.strip() for l in open(positive_path) if l.strip()}
DS_UID = "${DS_PROMETHEUS}"
# Grafana's variables: the dashboard's own (All = .*) and the built-in intervals.
subst = {"$__rate_interval": "1m", "$__interval": "10s", "$__range": "1m", "${DS_PROMETHEUS}": DS_UID}

# --- structure
report(dash.get("schemaVersion", 0) >= 36, "schemaVersion %s >= 36" % dash.get("schemaVersion"))
report(any(i.get("name") == "DS_PROMETHEUS" and i.get("pluginId") == "prometheus" for i in dash.get("__inputs", [])),
       "a DS_PROMETHEUS datasource input")
variables = {v["name"]: v for v in dash["templating"]["list"]}
report(variables.get("DS_PROMETHEUS", {}).get("type") == "datasource", "a DS_PROMETHEUS datasource variable")
report("instance" in variables and variables["instance"].get("allValue") == ".*", "an instance (node) variable, All = .*")
for name, v in variables.items():
    if v["type"] == "query": subst["$" + name] = v.get("allValue", ".*")
panels = dash["panels"] + [p for r in dash["panels"] for p in r.get("panels", [])]
ids = [p.get("id") for p in panels]
report(len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids), "%d panels with unique integer ids" % len(ids))
titles = [p.get("title") for p in panels if p["type"] != "row"]
report(len(titles) == len(set(titles)), "panel titles are unique")
bad = []
for p in panels:
    g = p.get("gridPos", {})
    ok = all(isinstance(g.get(k), int) for k in "xywh") and 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
    ok = ok and bool(p.get("title"))
    if p["type"] != "row":
        refs = [p.get("datasource")] + [t.get("datasource") for t in p.get("targets", [])]
        ok = ok and bool(p.get("targets")) and all(r == {"type": "prometheus", "uid": DS_UID} for r in refs)
        ok = ok and all(t.get("expr") and t.get("refId") for t in p["targets"])
    if not ok: bad.append(p.get("title") or "#%s" % p.get("id"))
report(not bad, "every panel has a title, a gridPos within 24 columns, targets with expr/refId and Prometheus "
       "datasource refs (%s)%s" % (DS_UID, ": not %s" % bad if bad else ""))
for p in panels:
    for q in panels:
        if p is q or p["type"] == "row" or q["type"] == "row": continue
        a, b = p["gridPos"], q["gridPos"]
        if a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]:
            report(False, "panels %r and %r overlap" % (p["title"], q["title"]))

def expand(expr):
    for k in sorted(subst, key=len, reverse=True): expr = expr.replace(k, subst[k])
    return expr
def query(expr):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": at})
    try:
        with urllib.request.urlopen(url, timeout=20) as r: body = json.load(r)
    except Exception as e:  # HTTPError carries Prometheus' JSON error
        try: body = json.load(e)
        except Exception: body = {"status": "error", "error": str(e)}
    return body
def values(body):
    return [float(s["value"][1]) for s in body.get("data", {}).get("result", [])]

# --- template variables: label_values(SELECTOR, LABEL) -> count by (LABEL) (SELECTOR)
for name, v in variables.items():
    if v["type"] != "query": continue
    d = v["definition"]
    assert d.startswith("label_values(") and d.endswith(")"), d
    sel, label = d[len("label_values("):-1].rsplit(",", 1)
    body = query("count by (%s) (%s)" % (label.strip(), expand(sel.strip())))
    n = len(values(body))
    report(body.get("status") == "success" and n > 0, "variable $%s: %d values" % (name, n))

# --- every panel's every expr
for p in panels:
    if p["type"] == "row": continue
    summary, ok, pos = [], True, False
    for t in p["targets"]:
        body = query(expand(t["expr"]))
        vs = values(body)
        if body.get("status") != "success" or not vs:
            ok = False
            summary.append("%s: %s" % (t["refId"], body.get("error") or "empty"))
            continue
        finite = [x for x in vs if not math.isnan(x)]
        pos = pos or any(x > 0 for x in finite)
        summary.append("%s: %d series, max %.4g" % (t["refId"], len(vs), max(finite) if finite else float("nan")))
    want_pos = p["title"] in positive
    if want_pos and not pos: ok = False
    report(ok, "panel %-42s %s%s" % (repr(p["title"]), "; ".join(summary), " (> 0 required)" if want_pos else ""))
missing = positive - set(titles)
report(not missing, "the panels listed as > 0 exist" + (": missing %s" % sorted(missing) if missing else ""))
sys.exit(1 if fails else 0)
PYEOF
check "the dashboard's structure, variables and every panel's PromQL (see above)" test $? = 0
finish
