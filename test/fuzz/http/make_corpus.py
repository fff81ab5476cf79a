#!/usr/bin/env python3
"""Seed corpus of the `http` fuzz target (test/fuzz/corpus/http/): the bytes
curl sends for the requests lib/http/README.md documents, captured on a
127.0.0.1 listener this script opens (it answers each request with a fixed
200 so curl finishes). Each seed is one byte selecting the server (0 client,
1 master, 2 client with auth) followed by the captured request bytes.
    python3 test/fuzz/http/make_corpus.py test/fuzz/corpus/http
"""
import os
import socket
import subprocess
import sys
import threading

TOKEN = "fuzz-token-0123456789abcdef"  # http_fuzz.cpp's token


def capture(args):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got = []

    def serve():
        c, _ = srv.accept()
        c.settimeout(2)
        data = b""
        try:
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
                head, sep, rest = data.partition(b"\r\n\r\n")
                if sep:
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        k, _, v = line.partition(b":")
                        if k.strip().lower() == b"content-length":
                            length = int(v.strip())
                    if len(rest) >= length:
                        break
        except socket.timeout:
            pass
        got.append(data)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        c.close()

    t = threading.Thread(target=serve)
    t.start()
    subprocess.run(["curl", "-s", "-o", "/dev/null"] + [a.replace("PORT", str(port)) for a in args], check=False,
                   timeout=10)
    t.join()
    srv.close()
    return got[0]


SEEDS = [
    # (name, server, curl arguments)
    ("client_put", 0, ["-X", "PUT", "--data-binary", "block-bytes-0123456789", "http://127.0.0.1:PORT/kv/my-key"]),
    ("client_get", 0, ["http://127.0.0.1:PORT/kv/k1"]),
    ("client_get_slash", 0, ["http://127.0.0.1:PORT/kv/layer0%2Fblock7"]),
    ("client_delete", 0, ["-X", "DELETE", "http://127.0.0.1:PORT/kv/k1"]),
    ("client_head", 0, ["-I", "http://127.0.0.1:PORT/kv/k1"]),
    ("client_stats", 0, ["http://127.0.0.1:PORT/stats"]),
    ("client_metrics", 0, ["http://127.0.0.1:PORT/metrics"]),
    ("client_health", 0, ["http://127.0.0.1:PORT/health"]),
    ("client_put_chunked", 0, ["-X", "PUT", "-H", "Transfer-Encoding: chunked", "--data-binary", "chunked-value",
                               "http://127.0.0.1:PORT/kv/a%20b"]),
    ("master_clients", 1, ["http://127.0.0.1:PORT/clients"]),
    ("master_keys", 1, ["http://127.0.0.1:PORT/keys?prefix=layer0/&limit=50"]),
    ("master_keys_cursor", 1, ["http://127.0.0.1:PORT/keys?prefix=layer0/&limit=5&cursor=8589934597"]),
    ("master_key", 1, ["http://127.0.0.1:PORT/key/layer0%2Fblock7"]),
    ("master_targets", 1, ["http://127.0.0.1:PORT/prometheus/targets"]),
    ("master_status", 1, ["http://127.0.0.1:PORT/status"]),
    ("master_status_json", 1, ["http://127.0.0.1:PORT/status.json"]),
    ("master_metrics", 1, ["http://127.0.0.1:PORT/metrics"]),
    ("auth_get", 2, ["-H", "Authorization: Bearer " + TOKEN, "http://127.0.0.1:PORT/kv/k1"]),
    ("auth_put_no_token", 2, ["-X", "PUT", "--data-binary", "v", "http://127.0.0.1:PORT/kv/k2"]),
    ("auth_health", 2, ["http://127.0.0.1:PORT/health"]),
]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, server, args in SEEDS:
        data = capture(args)
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes([server]) + data)
    # Keep-alive: two captured requests on one connection (PUT then GET).
    put = capture(["-X", "PUT", "--data-binary", "v2", "http://127.0.0.1:PORT/kv/k1"])
    get = capture(["http://127.0.0.1:PORT/kv/k1"])
    with open(os.path.join(out, "client_put_get_pipelined"), "wb") as f:
        f.write(bytes([0]) + put + get)


if __name__ == "__main__":
    main()
