#!/usr/bin/env python3
"""Seed corpora of the `toml_config` and `flags` fuzz targets: the shipped
example configs (conf/client.toml, conf/master.toml), TOML files using the
[[tiers]] tables, inline JSON, list and auth keys as the README documents
them, and the launch commands of the spec / README as argv words. The first
byte picks the node (0 mooncake_client, 1 mooncake_master).
    python3 test/fuzz/config/make_corpus.py   (from the repository root)
"""
import os

ROOT = "test/fuzz/corpus/"


def w(target, name, data):
    os.makedirs(ROOT + target, exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def argv(*words):
    return b"\0".join(x.encode() for x in words)


def main():
    w("toml_config", "conf_client", b"\x00" + open("conf/client.toml", "rb").read())
    w("toml_config", "conf_master", b"\x01" + open("conf/master.toml", "rb").read())
    w("toml_config", "client_two_tiers", b"\x00" + b'''master_server_address = "127.0.0.1:50051"
client_rpc_port = 12346
http_port = 0
rpc_timeout = "5s"
auth_token = "0123456789abcdef0123456789abcdef"
[[tiers]]
type = "DRAM"
capacity = "64MiB"
priority = 100
[[tiers]]
type = "SSD"
capacity = "1GiB"
priority = 10
path = "/var/lib/mooncake/ssd"
''')
    w("toml_config", "client_inline_json", b"\x00" + b'''tiered_backend_config = '{"tiers":[{"type":"DRAM","capacity":536870912,"priority":100}]}'
device_names = "mlx5_0,mlx5_1"
protocol = "rdma"
transfer_transport = "rdma"
attach = false
inline_threshold = "16KiB"
''')
    w("toml_config", "master_ttls", b"\x01" + b'''rpc_port = 50051
client_ttl = "2s"
client_drop_ttl = 30000
max_key_bytes = 4096
drain_grace = "5s"
''')
    w("flags", "client_spec", b"\x00" + argv(
        "--master_server_address", "127.0.0.1:50051", "--port", "50052", "--client_rpc_port", "12345",
        "--deployment_mode", "P2P", "--tiered_backend_config",
        '{"tiers":[{"type":"DRAM","capacity":536870912,"priority":100}]}'))
    w("flags", "client_eq_forms", b"\x00" + argv(
        "--http_port=0", "--rpc_timeout=10s", "--http_max_value_bytes=64MiB", "--attach=false",
        "--max_request_timeout", "30s", "--heartbeat_interval", "500ms", "--device_names=mlx5_0,mlx5_1"))
    w("flags", "client_limits", b"\x00" + argv(
        "--max_inflight_keys_per_connection", "1024", "--max_inflight_bytes_per_peer", "8GiB", "--inline_threshold",
        "64K", "--max_inline_value_bytes", "1MiB", "--rdma_bounce_bytes", "0", "--dm_lock_shard_count", "64",
        "--auth_token", "abcdefabcdefabcdefabcdefabcdefab,fedcbafedcbafedcbafedcbafedcbafe"))
    w("flags", "client_help", b"\x00" + argv("--help"))
    w("flags", "master_spec", b"\x01" + argv("--deployment_mode", "P2P", "--rpc_port", "50051"))
    w("flags", "master_ttls", b"\x01" + argv(
        "--client_ttl=2s", "--client_drop_ttl", "1m", "--metrics_port", "0", "--rpc_thread_num", "4",
        "--drain_grace", "250us", "--max_key_bytes=1024"))
    w("flags", "master_version", b"\x01" + argv("--version"))
    w("flags", "master_bad", b"\x01" + argv("--rpc_port", "0"))


if __name__ == "__main__":
    main()
