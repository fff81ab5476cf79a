"""Fixtures of the Python API tests: a real mooncake_master (and, where a test
asks, mooncake_client nodes and other Python processes) on 127.0.0.1 with free
ports. Every process a fixture starts is killed by PID when it ends.

Environment (set by meson test, see test/python/meson.build):
  MC_BIN       the build's apps directory (mooncake_master, mooncake_client)
  PYTHONPATH   the build's python directory (mooncake_p2p, mooncake)
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

BIN = os.environ.get("MC_BIN", os.path.join(os.path.dirname(__file__), "../../build/apps"))
HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


class Procs:
    """Processes started by a test; stop() kills them by PID."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []

    def spawn(self, name, argv, **kw):
        log = open(os.path.join(self.workdir, name + ".log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **kw)
        p.log_path = log.name
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.terminate()
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


@pytest.fixture
def procs(tmp_path):
    p = Procs(str(tmp_path))
    yield p
    p.stop()


@pytest.fixture
def master(procs):
    """A fresh master per test: its address host:port."""
    port = free_port()
    procs.spawn("master", [os.path.join(BIN, "mooncake_master"), "--rpc_port", str(port), "--metrics_port", "0",
                           "--client_ttl", "2s"])
    wait_port(port)
    return f"127.0.0.1:{port}"


def free_rpc_port():
    """A free client RPC port whose derived attach port (+1000) is free too."""
    for _ in range(100):
        p = free_port()
        if p + 1000 <= 65535:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", p + 1000)) != 0:
                    return p
    raise RuntimeError("no free port pair")


def start_node(procs, master_addr, name="node", dram="64MiB", extra=()):
    """A mooncake_client process (attach service on its derived port);
    returns (process, rpc port)."""
    rpc, te = free_rpc_port(), free_port()
    tiers = '{"tiers":[{"type":"DRAM","capacity":"%s","priority":100}]}' % dram
    p = procs.spawn(name, [os.path.join(BIN, "mooncake_client"), "--master_server_address", master_addr,
                           "--port", str(te), "--client_rpc_port", str(rpc), "--http_port", "0",
                           "--heartbeat_interval", "200ms", "--tiered_backend_config", tiers, *extra])
    wait_port(rpc)
    if "--attach=false" not in extra:
        wait_port(rpc + 1000)
    return p, rpc


def sigstop(pid, timeout=10.0):
    """SIGSTOPs `pid` and waits until every one of its threads is stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass
        if states and all(st == "T" for st in states):
            return
        time.sleep(0.01)
    raise TimeoutError(f"process {pid} did not stop")


def py_proc(procs, name, script, *args):
    """Another Python process running `script` (a file in this folder)."""
    return procs.spawn(name, [sys.executable, os.path.join(HERE, script), *map(str, args)], env=dict(os.environ))


def new_store(master_addr, segment=64 << 20, **extra):
    """An embedded node of the master (setup's dict form with small timeouts)."""
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
           "global_segment_size": segment, "local_buffer_size": 16 << 20, "protocol": "tcp",
           "master_server_addr": master_addr, "heartbeat_interval": "200ms", "rpc_timeout": "3s"}
    cfg.update(extra)
    rc = s.setup(cfg)
    assert rc == 0, f"setup failed: {rc}"
    return s


@pytest.fixture
def store(master):
    s = new_store(master)
    yield s
    s.close()
