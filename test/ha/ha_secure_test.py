#!/usr/bin/env python3
"""Master HA on a secured etcd, end to end with the real binaries (suite
integration): etcd serves TLS only, requires client certificates, and has
authentication on (user root) with simple tokens that expire after 2 s of
disuse, so that tokens are fetched again all the time (401 -> authenticate
-> retry).
 1. two masters (--etcd_endpoints https://..., CA, client certificate, user
    and password file) elect a leader; a node follows
    etcd://https://...; values of odd sizes round-trip through the CLI
    (checksums);
 2. after 5 s with no CLI traffic (every token idle past its TTL somewhere)
    every value is still readable;
 3. kill -9 of the leader: the standby, watching the leader key over TLS,
    takes over and every value is read back through it;
 4. refused: a CLI with a wrong password (ACCESS_DENIED), one without a
    client certificate (TLS handshake refused), one that talks plain TCP to
    the TLS port, one whose CA does not match; the binaries refuse bad
    settings at startup (password file missing, certificate without key).
The certificates are made here with the openssl command line tool.
Usage: ha_secure_test.py APPS_DIR. Exit 77 (skip) when etcd is missing.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ha_cluster import Cluster, fail  # noqa: E402

BOUND_S = 15.0



def openssl(*args):
    r = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("openssl %s: %s" % (" ".join(args), r.stderr))


def make_pki(d, name):
    """A CA and, signed by it, a server certificate for 127.0.0.1 and a
    client certificate without a CommonName (etcd 3.4's gateway refuses a
    client certificate that has one when client-cert-auth is on: it would
    be taken for a user name). Returns the file paths."""
    ca_key, ca = os.path.join(d, name + "-ca.key"), os.path.join(d, name + "-ca.pem")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", "/CN=%s test CA" % name, "-keyout", ca_key, "-out", ca)
    out = {"ca": ca}
    for kind, subj, ext in (("server", "/CN=127.0.0.1",
                             "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"),
                            ("client", "/O=mooncake-p2p test client", "extendedKeyUsage=clientAuth")):
        key, csr, pem = (os.path.join(d, "%s-%s.%s" % (name, kind, e)) for e in ("key", "csr", "pem"))
        extfile = os.path.join(d, "%s-%s.ext" % (name, kind))
        with open(extfile, "w") as f:
            f.write(ext + "\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", subj,
                "-keyout", key, "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
                "-extfile", extfile, "-out", pem)
        out[kind + "_cert"], out[kind + "_key"] = pem, key
    return out


def main():
    apps = sys.argv[1]
    if not shutil.which("etcd") or not shutil.which("etcdctl") or not shutil.which("openssl"):
        print("SKIP: etcd/etcdctl/openssl not installed")
        return 77
    tmp = tempfile.mkdtemp(prefix="mc-ha-secure-")
    try:
        pki = make_pki(tmp, "good")
        other = make_pki(tmp, "other")  # a CA that did not sign etcd's certificate
        pw = os.path.join(tmp, "password")
        with open(pw, "w") as f:
            f.write("s3cret-pw\n")
        os.chmod(pw, 0o600)
        secure = {"ca": pki["ca"], "server_cert": pki["server_cert"], "server_key": pki["server_key"],
                  "client_cert": pki["client_cert"], "client_key": pki["client_key"],
                  "user": "root", "password": "s3cret-pw", "password_file": pw, "token_ttl": 2}
        c = Cluster(apps, masters=2, secure=secure, cluster_id="ha_secure")
        try:
            return run(c, tmp, pki, other)
        finally:
            c.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(c, tmp, pki, other):
    c.start_etcd()
    c.enable_auth()
    if c.etcdctl("get", "x", auth=False).returncode == 0:
        fail("etcd answers without credentials: authentication is not on", c)
    c.start_master(0)
    c.start_master(1)
    first = c.wait_leader(timeout=c.STARTUP_TIMEOUT_S)
    c.start_node()
    values = c.make_values(tmp, "sec", [1, 4097, (1 << 20) + 13])
    c.put_values(values)

    def check_all(within, what):
        return c.check_values(values, tmp, within, what)

    check_all(10, "TLS + auth")
    print("leader %s over TLS with client certificates and authentication; %d values stored" % (first, len(values)))
    time.sleep(5)  # tokens idle past their 2 s TTL: each call re-authenticates
    check_all(10, "after the tokens expired")
    for name in c.procs:
        if c.procs[name].poll() is not None:
            fail("%s exited (%s)" % (name, c.procs[name].returncode), c)
    print("every value readable after 5 s of idle tokens")

    t0 = time.time()
    c.kill(first)
    check_all(BOUND_S, "after kill -9 of the leader")
    second = c.wait_leader(not_name=first)
    print("kill -9 %s: %s leads; every key readable %.2f s after the kill" % (first, second, time.time() - t0))

    # Refused connections and credentials (each CLI call fails, exit 1).
    bad_pw = os.path.join(tmp, "bad-password")
    with open(bad_pw, "w") as f:
        f.write("wrong\n")
    out = os.path.join(tmp, "out")
    key = next(iter(values))
    good = c.etcd_flags()
    refused = {
        "a wrong password": (c.etcd_flags(password_file=bad_pw), None, "ACCESS_DENIED"),
        "no client certificate": (["--etcd_ca_file", pki["ca"], "--etcd_username", "root",
                                   "--etcd_password_file", c.secure["password_file"]], None, None),
        "another CA": (["--etcd_ca_file", other["ca"]] + good[2:], None, None),
        "plain TCP to the TLS port": (good[6:], "etcd://127.0.0.1:%d" % c.etcd_port, None),
    }
    for what, (flags, master, error) in refused.items():
        r = c.cli("get", key, out, etcd_flags=flags, master=master, timeout_ms=1500)
        err = r.stderr.decode(errors="replace")
        if r.returncode != 1 or (error and error not in err):
            fail("%s: rc %d, %s" % (what, r.returncode, err), c)
        print("refused, %s: %s" % (what, err.strip().splitlines()[-1] if err.strip() else ""))
    # Settings that cannot work are refused at startup (usage error, exit 2).
    for what, flags in (("a missing password file", ["--etcd_username", "root", "--etcd_password_file",
                                                      os.path.join(tmp, "nope")]),
                        ("a certificate without its key", ["--etcd_cert_file", pki["client_cert"]]),
                        ("a key that is not the certificate's", ["--etcd_cert_file", pki["client_cert"],
                                                                 "--etcd_key_file", other["client_key"]])):
        r = c.cli("get", key, out, etcd_flags=flags)
        if r.returncode != 2:
            fail("%s: rc %d, %s" % (what, r.returncode, r.stderr.decode(errors="replace")), c)
        m = subprocess.run([os.path.join(c.apps, "mooncake_master"), "--ha_backend", "etcd", "--etcd_endpoints",
                            "127.0.0.1:%d" % c.etcd_port, "--ha_advertise_address", "127.0.0.1:1", *flags],
                           capture_output=True, timeout=30)
        if m.returncode == 0 or b"etcd_" not in m.stderr:
            fail("mooncake_master with %s: rc %d, %s" % (what, m.returncode, m.stderr), c)
        print("refused at startup, %s: %s" % (what, m.stderr.decode(errors="replace").strip().splitlines()[-1]))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
