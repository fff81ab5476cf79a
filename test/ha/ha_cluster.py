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


def fail(msg, c=None):
    """Test failure: prints `msg` and the tail of every log of cluster `c`, exits 1."""
    import sys
    print("FAIL:", msg)
    if c:
        for n in sorted(c.procs):
            print("---- %s ----\n%s" % (n, c.log(n)[-3000:]))
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """`secure`: None (plain etcd), or a dict of TLS and auth settings: "ca",
    "server_cert", "server_key" (etcd's), "client_cert", "client_key" (etcd
    then requires client certificates), "user", "password", "password_file"
    (enable_auth() turns etcd's authentication on), "token_ttl" (seconds)."""

    def __init__(self, apps, masters=2, lease_ttl_ms=2000, cluster_id="ha_test", secure=None, etcd_members=1):
        self.apps = apps
        self.secure = secure
        self.cluster_id = cluster_id
        self.lease_ttl_ms = lease_ttl_ms
        self.work = tempfile.mkdtemp(prefix="mc-ha-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.procs = {}  # name -> Popen
        self.etcd_ports = [free_port() for _ in range(etcd_members)]
        self.etcd_peers = [free_port() for _ in range(etcd_members)]
        self.etcd_port = self.etcd_ports[0]
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

    def start_etcd(self, member=None):
        """Starts every etcd member (or only `member`, e.g. again after a
        kill: it rejoins with its data directory) and waits until it answers."""
        etcd = shutil.which("etcd")
        if not etcd:
            raise RuntimeError("etcd not installed (scripts/install-deps.sh installs etcd-server)")
        sec = self.secure
        scheme = "https" if sec else "http"
        cluster = ",".join("e%d=http://127.0.0.1:%d" % (i, p) for i, p in enumerate(self.etcd_peers))
        members = range(len(self.etcd_ports)) if member is None else [member]
        for i in members:
            client = "%s://127.0.0.1:%d" % (scheme, self.etcd_ports[i])
            peer = "http://127.0.0.1:%d" % self.etcd_peers[i]
            tls = []
            if sec:
                tls = ["--cert-file", sec["server_cert"], "--key-file", sec["server_key"],
                       "--trusted-ca-file", sec["ca"], "--client-cert-auth",
                       "--auth-token", "simple", "--auth-token-ttl", str(sec.get("token_ttl", 300))]
            name = "etcd" if i == 0 else "etcd%d" % i
            self._spawn(name, [etcd, "--name", "e%d" % i, "--data-dir", os.path.join(self.work, "etcd%d" % i),
                               "--listen-client-urls", client, "--advertise-client-urls", client,
                               "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                               "--initial-cluster", cluster, "--initial-cluster-token", self.cluster_id,
                               "--heartbeat-interval", "50", "--election-timeout", "250", "--log-level", "warn",
                               *tls])
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                for i in members:
                    with socket.create_connection(("127.0.0.1", self.etcd_ports[i]), timeout=0.5):
                        pass
                if self.etcdctl("endpoint", "health", auth=False, member=members[0]).returncode == 0:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("etcd did not start:\n" + self.log("etcd"))

    def kill_etcd(self, member):
        self.kill("etcd" if member == 0 else "etcd%d" % member)

    @property
    def etcd_endpoints(self):
        return ",".join("%s127.0.0.1:%d" % ("https://" if self.secure else "", p) for p in self.etcd_ports)

    @property
    def locator(self):
        return "etcd://" + self.etcd_endpoints

    def etcd_flags(self, password_file=None):
        """The --etcd_* flags of our binaries for a secured etcd (none otherwise)."""
        sec = self.secure
        if not sec:
            return []
        flags = ["--etcd_ca_file", sec["ca"], "--etcd_cert_file", sec["client_cert"],
                 "--etcd_key_file", sec["client_key"]]
        if "user" in sec:
            flags += ["--etcd_username", sec["user"], "--etcd_password_file", password_file or sec["password_file"]]
        return flags

    def etcdctl(self, *args, auth=True, member=None):
        """Runs etcdctl against our etcd (with its TLS and credentials); every
        member, or only `member`."""
        eps = self.etcd_endpoints if member is None else "%s127.0.0.1:%d" % (
            "https://" if self.secure else "", self.etcd_ports[member])
        argv = ["etcdctl", "--endpoints", eps]
        sec = self.secure
        if sec:
            argv += ["--cacert", sec["ca"], "--cert", sec["client_cert"], "--key", sec["client_key"]]
            if auth and "user" in sec:
                argv += ["--user", "%s:%s" % (sec["user"], sec["password"])]
        return subprocess.run(argv + list(args), capture_output=True, text=True,
                              env={**os.environ, "ETCDCTL_API": "3"}, timeout=10)

    def enable_auth(self):
        """Creates the root user (password from `secure`) and turns etcd's authentication on."""
        user = self.secure["user"]
        for args in (["user", "add", "%s:%s" % (user, self.secure["password"])],
                     ["user", "grant-role", user, "root"], ["auth", "enable"]):
            r = self.etcdctl(*args, auth=False)
            if r.returncode != 0:
                raise RuntimeError("etcdctl %s: %s" % (" ".join(args), r.stderr))

    def start_master(self, i):
        return self._spawn("master%d" % i, [
            os.path.join(self.apps, "mooncake_master"), "--rpc_address", "127.0.0.1",
            "--rpc_port", str(self.master_ports[i]), "--http_host", "127.0.0.1",
            "--metrics_port", str(self.http_ports[i]), "--ha_backend", "etcd",
            "--etcd_endpoints", self.etcd_endpoints,
            "--cluster_id", self.cluster_id, "--ha_lease_ttl", "%dms" % self.lease_ttl_ms, *self.etcd_flags()])

    def start_node(self, extra=(), http_port=0):
        """A node following etcd://; `http_port` 0 = no HTTP server."""
        i = len(self.nodes)
        port = free_port()
        self.nodes.append(port)
        return self._spawn("node%d" % i, [
            os.path.join(self.apps, "mooncake_client"), "--master_server_address", self.locator,
            "--cluster_id", self.cluster_id, "--port", "0", "--client_rpc_port", str(port),
            "--http_port", str(http_port),
            "--heartbeat_interval", "500ms", *self.etcd_flags(), *extra])

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
        out = self.etcdctl("get", "--print-value-only", "mooncake-store/%s/master_view" % self.cluster_id)
        v = out.stdout.strip()
        return v or None

    def records(self, kind):
        """{id: lease} of the membership records under mooncake-store/<cluster>/<kind>/
        ("members": the clients' own, "clients": the leader's)."""
        import base64
        import json
        prefix = "mooncake-store/%s/%s/" % (self.cluster_id, kind)
        out = self.etcdctl("get", "--prefix", prefix, "-w", "json")
        kvs = json.loads(out.stdout or "{}").get("kvs", [])
        return {base64.b64decode(kv["key"]).decode()[len(prefix):]: int(kv.get("lease", 0)) for kv in kvs}

    def leader_name(self):
        addr = self.leader()
        for i, port in enumerate(self.master_ports):
            if addr == "127.0.0.1:%d" % port:
                return "master%d" % i
        return None

    # The first election after a cold start (etcd and the masters starting on
    # a loaded 2-core machine, other suites running beside): a setup wait,
    # not a bound of the product (failover bounds pass their own timeout).
    STARTUP_TIMEOUT_S = 60

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

    # -- values through the CLI (shared by the HA tests) --------------------
    @staticmethod
    def make_values(scratch, prefix, sizes):
        """{key: path} of random values of `sizes` bytes written under `scratch`."""
        values = {}
        for i, size in enumerate(sizes):
            path = os.path.join(scratch, "%s%d" % (prefix, i))
            with open(path, "wb") as f:
                f.write(os.urandom(size))
            values["%s-key-%d" % (prefix, i)] = path
        return values

    def put_values(self, values, within=20):
        """Puts every {key: path} through the CLI, retrying for up to `within`
        s in all; fail()s naming the key that could not be put."""
        deadline = time.time() + within
        for key, path in values.items():
            while True:
                r = self.cli("put", key, path)
                if r.returncode == 0:
                    break
                if time.time() > deadline:
                    fail("put %s: %s" % (key, r.stderr.decode(errors="replace")), self)
                time.sleep(0.2)

    def check_values(self, values, scratch, within, what):
        """Gets every {key: path} through the CLI (retrying for up to `within`
        s in all) and compares the bytes; returns the seconds it took. fail()s
        naming the key and what went wrong."""
        import hashlib
        t0 = time.time()
        out = os.path.join(scratch, "check-out")
        for key, path in values.items():
            while True:
                r = self.cli("get", key, out)
                if r.returncode == 0:
                    break
                if time.time() - t0 > within:
                    fail("%s: get %s: %s" % (what, key, r.stderr.decode(errors="replace")), self)
                time.sleep(0.1)
            with open(out, "rb") as a, open(path, "rb") as b:
                if hashlib.sha256(a.read()).digest() != hashlib.sha256(b.read()).digest():
                    fail("%s: %s came back with other bytes" % (what, key), self)
        return time.time() - t0

    def cli(self, *args, master=None, timeout_ms=2000, etcd_flags=None):
        """`etcd_flags`: the CLI's --etcd_* flags (default: etcd_flags())."""
        argv = [os.path.join(self.apps, "mooncake_cli"), "--master_server_address", master or self.locator,
                "--cluster_id", self.cluster_id, "--rpc_timeout", str(timeout_ms),
                *(self.etcd_flags() if etcd_flags is None else etcd_flags), *args]
        return subprocess.run(argv, capture_output=True, timeout=60)
