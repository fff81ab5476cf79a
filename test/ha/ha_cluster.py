"""A local HA cluster for tests and benchmarks: one etcd member (Debian's
etcd-server, data on tmpfs, non-default ports, fast raft timings), N masters
with --ha_backend etcd, and client nodes following etcd://. Every process is
started by this module and killed by its own PID in stop(); nothing else is
touched. Ports are taken from a free range probed on 127.0.0.1.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, apps, masters=2, lease_ttl_ms=2000, cluster_id="ha_test"):
        self.apps = apps
        self.cluster_id = cluster_id
        self.lease_ttl_ms = lease_ttl_ms
        self.work = tempfile.mkdtemp(prefix="mc-ha-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.procs = {}  # name -> Popen
        self.etcd_port = free_port()
        self.etcd_peer = free_port()
        self.master_ports = [free_port() for _ in range(masters)]
        self.http_ports = [free_port() for _ in range(masters)]
        self.nodes = []

    # -- processes ---------------------------------------------------------
    def _spawn(self, name, argv):
        log = open(os.path.join(self.work, name + ".log"), "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs[name] = p
        return p

    def log(self, name):
        try:
            with open(os.path.join(self.work, name + ".log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def start_etcd(self):
        etcd = shutil.which("etcd")
        if not etcd:
            raise RuntimeError("etcd not installed (scripts/install-deps.sh installs etcd-server)")
        client = "http://127.0.0.1:%d" % self.etcd_port
        peer = "http://127.0.0.1:%d" % self.etcd_peer
        self._spawn("etcd", [etcd, "--name", "e0", "--data-dir", os.path.join(self.work, "etcd"),
                             "--listen-client-urls", client, "--advertise-client-urls", client,
                             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                             "--initial-cluster", "e0=" + peer, "--heartbeat-interval", "50",
                             "--election-timeout", "250", "--log-level", "warn"])
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.etcd_port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("etcd did not start:\n" + self.log("etcd"))

    @property
    def locator(self):
        return "etcd://127.0.0.1:%d" % self.etcd_port

    def start_master(self, i):
        return self._spawn("master%d" % i, [
            os.path.join(self.apps, "mooncake_master"), "--rpc_address", "127.0.0.1",
            "--rpc_port", str(self.master_ports[i]), "--http_host", "127.0.0.1",
            "--metrics_port", str(self.http_ports[i]), "--ha_backend", "etcd",
            "--etcd_endpoints", "127.0.0.1:%d" % self.etcd_port, "--cluster_id", self.cluster_id,
            "--ha_lease_ttl", "%dms" % self.lease_ttl_ms])

    def start_node(self, extra=()):
        i = len(self.nodes)
        port = free_port()
        self.nodes.append(port)
        return self._spawn("node%d" % i, [
            os.path.join(self.apps, "mooncake_client"), "--master_server_address", self.locator,
            "--cluster_id", self.cluster_id, "--port", "0", "--client_rpc_port", str(port), "--http_port", "0",
            "--heartbeat_interval", "500ms", *extra])

    def signal(self, name, sig):
        p = self.procs[name]
        if p.poll() is None:
            p.send_signal(sig)

    def kill(self, name):
        p = self.procs.get(name)
        if p and p.poll() is None:
            p.kill()
            p.wait()

    def stop(self):
        for name, p in list(self.procs.items()):
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                except OSError:
                    pass
                p.kill()
            p.wait()
        shutil.rmtree(self.work, ignore_errors=True)

    # -- etcd and the CLI --------------------------------------------------
    def leader(self):
        """The leader's address from etcd, or None."""
        out = subprocess.run(["etcdctl", "--endpoints", "127.0.0.1:%d" % self.etcd_port, "get", "--print-value-only",
                              "mooncake-store/%s/master_view" % self.cluster_id],
                             capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=10)
        v = out.stdout.strip()
        return v or None

    def records(self, kind):
        """{id: lease} of the membership records under mooncake-store/<cluster>/<kind>/
        ("members": the clients' own, "clients": the leader's)."""
        import base64
        import json
        prefix = "mooncake-store/%s/%s/" % (self.cluster_id, kind)
        out = subprocess.run(["etcdctl", "--endpoints", "127.0.0.1:%d" % self.etcd_port, "get", "--prefix", prefix,
                              "-w", "json"],
                             capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=10)
        kvs = json.loads(out.stdout or "{}").get("kvs", [])
        return {base64.b64decode(kv["key"]).decode()[len(prefix):]: int(kv.get("lease", 0)) for kv in kvs}

    def leader_name(self):
        addr = self.leader()
        for i, port in enumerate(self.master_ports):
            if addr == "127.0.0.1:%d" % port:
                return "master%d" % i
        return None

    def wait_leader(self, timeout=20, not_name=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            n = self.leader_name()
            if n and n != not_name:
                return n
            time.sleep(0.05)
        raise RuntimeError("no leader elected within %s s" % timeout)

    def http(self, name, path):
        """GET http://127.0.0.1:<master's HTTP port><path>: (status, body) or (None, error)."""
        import urllib.error
        import urllib.request
        url = "http://127.0.0.1:%d%s" % (self.http_ports[int(name[-1])], path)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except OSError as e:
            return None, str(e)

    def cli(self, *args, master=None, timeout_ms=2000):
        argv = [os.path.join(self.apps, "mooncake_cli"), "--master_server_address", master or self.locator,
                "--cluster_id", self.cluster_id, "--rpc_timeout", str(timeout_ms), *args]
        return subprocess.run(argv, capture_output=True, timeout=60)
