#!/usr/bin/env bash
# Three clients, each in its own network namespace with its own address, plus
# the master and the CLI in a fourth ("hub") namespace that bridges them:
# nothing may silently depend on 127.0.0.1. Skips (77) without root or ip(8).
BIN=${1:?usage: netns_test.sh BUILD/apps}
source "$(dirname "$0")/lib.sh"
[[ $(id -u) == 0 ]] || { echo "skip: needs root for ip netns"; exit 77; }
command -v ip >/dev/null || { echo "skip: no ip(8)"; exit 77; }
TAG=mc$$
HUB=${TAG}hub
NS=()
teardown() {
  cleanup
  for n in "${NS[@]:-}"; do [[ -n "$n" ]] && ip netns del "$n" 2>/dev/null; done
  ip netns del "$HUB" 2>/dev/null
}
trap teardown EXIT
ip netns add "$HUB" || { echo "skip: cannot create a network namespace"; exit 77; }
ip -n "$HUB" link set lo up
ip -n "$HUB" link add br0 type bridge
ip -n "$HUB" addr add 10.199.6.1/24 dev br0
ip -n "$HUB" link set br0 up
for i in 1 2 3; do
  n=${TAG}n$i
  ip netns add "$n"; NS+=("$n")
  ip -n "$n" link set lo up
  ip link add "${TAG}v$i" netns "$n" type veth peer name "p$i" netns "$HUB"
  ip -n "$n" link set "${TAG}v$i" name eth0
  ip -n "$n" addr add "10.199.6.1$i/24" dev eth0
  ip -n "$n" link set eth0 up
  ip -n "$HUB" link set "p$i" master br0
  ip -n "$HUB" link set "p$i" up
done
cd "$WORK"
inns() { local n=$1; shift; ip netns exec "$n" "$@"; }

spawn master ip netns exec "$HUB" "$BIN/mooncake_master" --deployment_mode P2P --rpc_address 10.199.6.1 --rpc_port 50051
wait_port 10.199.6.1 50051 20 "$HUB" || exit 1
for i in 1 2 3; do
  # Bound to 0.0.0.0: each must advertise its own namespace address, not loopback.
  spawn "c$i" ip netns exec "${TAG}n$i" "$BIN/mooncake_client" --master_server_address 10.199.6.1:50051 \
    --port 50052 --client_rpc_port 12345 --deployment_mode P2P --client_id "node$i" \
    --tiered_backend_config '{"tiers":[{"type":"DRAM","capacity":"128MiB","priority":100}]}'
done
for i in 1 2 3; do wait_port "10.199.6.1$i" 12345 30 "$HUB" || exit 1; done
CLI=(ip netns exec "$HUB" "$BIN/mooncake_cli" --master_server_address 10.199.6.1:50051 --local_hostname 10.199.6.1)
check "three clients registered with their own addresses" \
  wait_for 10 bash -c "$(printf '%q ' "${CLI[@]}") clients | grep -E 'node[123] +healthy +10\.199\.6\.1[123]:12345' | wc -l | grep -qx 3"

for i in 1 2 3; do
  random_file "in.$i" $((1000003 * i))
  check "remote write into node$i from the hub" "${CLI[@]}" put --target "10.199.6.1$i:12345" "k$i" "in.$i"
done
for i in 1 2 3; do
  check "remote read of k$i back to the hub" bash -c "$(printf '%q ' "${CLI[@]}") get k$i out.$i && cmp -s in.$i out.$i"
done
check "stat shows node2's namespace address" bash -c "$(printf '%q ' "${CLI[@]}") stat k2 | grep -q 'transfer=10.199.6.12:50052'"
finish
