"""Per-dataset authorization (issue 25) with real TLS on loopback.

Certificates are made in the test with the openssl command (skipped when it
is not installed): a CA, a server certificate (SAN localhost, 127.0.0.1),
client certificates for two teams (SAN URIs spiffe://corp/team-a/... and
.../team-b/...) and an expired one for team A. A daemon with mutual TLS
serves datasets "alpha" and "beta" with a policy that gives each team one.

Bearer tokens: a second daemon serves plaintext on 127.0.0.1 with a token
file; clients reach it through an in-test TLS-terminating relay (asyncio
TCP, ALPN h2) that forwards the HTTP/2 bytes, and with them the
`authorization` header, unchanged - the shape of a proxy deployment.
"""

import asyncio
import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import threading
import time
import urllib.request

import pytest

import nearprep
from conftest import NEARPREPD, Daemon

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="openssl not installed")

CLI = os.environ.get("NEARPREP_CLI")
ARGS = dict(batch_size=4, seed=1, height=32, width=32, dtype="uint8")
TEAM_A = "spiffe://corp/team-a/trainer-1"
TEAM_B = "spiffe://corp/team-b/trainer-1"
TOKEN_CI = "ci-token-7f3a9c2e1b"       # only its SHA-256 is in the token file
TOKEN_REVOKED = "old-token-55d1e0"


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _issue(d, name, subj, ext, days="2"):
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    (d / f"{name}.ext").write_text(ext)
    _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subj, cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", days, "-out", f"{name}.pem",
             "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("authz-certs")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=nearprep authz test CA", cwd=d)
    _issue(d, "server", "/CN=localhost",
           "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
           "extendedKeyUsage=serverAuth\n")
    client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
    # CN differs from the URI: the URI is the identity (first preference).
    _issue(d, "team-a", "/CN=not-the-identity-a",
           f"subjectAltName=URI:{TEAM_A},DNS:a.corp\n" + client_ext)
    _issue(d, "team-b", "/CN=not-the-identity-b",
           f"subjectAltName=URI:{TEAM_B}\n" + client_ext)
    _issue(d, "team-a-expired", "/CN=expired",
           f"subjectAltName=URI:{TEAM_A}\n" + client_ext, days="-1")
    return d


def _policy(audit_log, teams=("a", "b"), token_file=None):
    rules = []
    if "a" in teams:
        rules.append("    - name: team-a\n"
                     "      identities: ['spiffe://corp/team-a/*']\n"
                     "      datasets: [alpha]\n"
                     "      operations: [list, stream]\n")
    if "b" in teams:
        rules.append("    - name: team-b\n"
                     "      identities: ['spiffe://corp/team-b/*']\n"
                     "      datasets: ['bet*']\n"
                     "      operations: [list, stream, info]\n")
    if token_file:
        rules.append("    - name: ci\n"
                     "      identities: ['token:ci']\n"
                     "      datasets: [beta]\n")
    text = f"authorization:\n  audit_log: {audit_log}\n"
    if token_file:
        text += f"  token_file: {token_file}\n"
    return text + "  rules:\n" + "".join(rules)


def _write_config(daemon, sample_dir, policy, tls=None, log_level="info"):
    text = f"listen: 127.0.0.1\nlog_level: {log_level}\n"
    if tls:
        text += (f"tls:\n  cert: {tls / 'server.pem'}\n  key: {tls / 'server.key'}\n"
                 f"  client_ca: {tls / 'ca.pem'}\n")
    text += "datasets:\n"
    for name in ("alpha", "beta"):
        text += f"  - name: {name}\n    format: image_folder\n    root: {sample_dir}\n"
    with open(daemon.config, "w") as f:
        f.write(text + policy)


def _wait_log(daemon, needle, start=0, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(daemon.log, errors="replace") as f:
            text = f.read()
        if needle in text[start:]:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} not in the daemon's log:\n{text[-3000:]}")


def _log_size(daemon):
    return len(open(daemon.log, errors="replace").read())


@pytest.fixture(scope="module")
def mtls_daemon(tmp_path_factory, sample_dir, certs):
    if NEARPREPD is None:
        pytest.skip("nearprepd not built")
    work = tmp_path_factory.mktemp("authz-mtls")
    d = Daemon(work, {}, name="mtls", workers=2,
               extra=["--metrics-listen", "127.0.0.1:0",
                      "--metrics-port-file", str(work / "metrics-port")])
    d.audit = work / "audit.jsonl"
    d.metrics_file = work / "metrics-port"
    _write_config(d, sample_dir, _policy(d.audit), tls=certs)
    d.start()
    yield d
    d.stop()


def _client(d, certs, team, **kw):
    return nearprep.Client(
        d.target, tls=(certs / "ca.pem").read_bytes(),
        private_key=(certs / f"{team}.key").read_bytes(),
        certificate_chain=(certs / f"{team}.pem").read_bytes(),
        tls_server_name="localhost", rpc_timeout=5, reconnect_deadline=1,
        initial_backoff=0.05, max_backoff=0.2, native=False, **kw)


def _one_batch(client, dataset):
    batches = list(client.batches(dataset, max_batches=1, **ARGS))
    assert len(batches) == 1
    return batches[0]


def _metric(d, name, **labels):
    port = int(open(d.metrics_file).read())
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
                   if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize("team,own,other,identity", [
    ("team-a", "alpha", "beta", TEAM_A),
    ("team-b", "beta", "alpha", TEAM_B),
])
def test_each_team_streams_its_own_and_is_denied_the_other(mtls_daemon, certs, team, own,
                                                          other, identity):
    d = mtls_daemon
    denied_before = _metric(d, "nearprep_authz_decisions_total", decision="deny",
                            dataset=other)
    with _client(d, certs, team) as c:
        assert len(_one_batch(c, own).sample_ids) == 4
        with pytest.raises(nearprep.PermissionDeniedError) as e:
            _one_batch(c, other)
        assert e.value.code == "PERMISSION_DENIED"
        assert f"'{other}'" in e.value.details and f"'{identity}'" in e.value.details
        # ListDatasets shows only what this identity may read.
        assert [x.name for x in c.datasets()] == [own]
    assert _metric(d, "nearprep_authz_decisions_total", decision="deny",
                   dataset=other) == denied_before + 1
    # The audit log has one JSON line for the stream and one for the denial.
    records = [json.loads(line) for line in open(d.audit)]
    mine = [r for r in records if r["identity"] == identity]
    assert {"dataset": own, "operation": "stream", "decision": "allow", "rule": team} \
        .items() <= mine[-2].items()
    assert {"dataset": other, "operation": "stream", "decision": "deny", "rule": ""} \
        .items() <= mine[-1].items()
    assert mine[-1]["peer"].startswith("ipv4:127.0.0.1:") and mine[-1]["time"].endswith("Z")


def test_info_needs_the_info_operation(mtls_daemon, certs):
    with _client(mtls_daemon, certs, "team-b") as b:
        assert b.info().version
    with _client(mtls_daemon, certs, "team-a") as a:
        with pytest.raises(nearprep.PermissionDeniedError, match="GetServerInfo"):
            a.info()


def test_explicit_id_request_is_checked_like_any_stream(mtls_daemon, certs):
    # A fleet explicit-ids request for the other team's dataset: refused by
    # the policy before validation would look at the ids.
    with _client(mtls_daemon, certs, "team-b") as c:
        req = c.request("alpha", batch_size=2, height=32, width=32, dtype="uint8")
        req.sample_ids.extend([0, 1])
        with pytest.raises(nearprep.PermissionDeniedError, match="'alpha'"):
            list(c.batches(request=req))


def test_expired_and_missing_certificates_get_nothing(mtls_daemon, certs):
    with _client(mtls_daemon, certs, "team-a-expired") as c:
        with pytest.raises(nearprep.NearprepError) as e:
            _one_batch(c, "alpha")
        assert e.value.code in ("UNAVAILABLE", "UNAUTHENTICATED")
    no_cert = nearprep.Client(mtls_daemon.target, tls=(certs / "ca.pem").read_bytes(),
                              tls_server_name="localhost", rpc_timeout=3,
                              reconnect_deadline=1, initial_backoff=0.05, native=False)
    with no_cert, pytest.raises(nearprep.NearprepError) as e:
        no_cert.datasets()
    assert e.value.code in ("UNAVAILABLE", "UNAUTHENTICATED")


class TlsRelay:
    """A TLS-terminating TCP relay on 127.0.0.1 (ALPN h2): what a proxy in
    front of the daemon does. The HTTP/2 bytes, and so the authorization
    header, reach the daemon unchanged over plaintext loopback."""

    def __init__(self, cert, key, backend_port):
        self.backend_port = backend_port
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        ctx.set_alpn_protocols(["h2"])
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        async def pipe(reader, writer):
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                writer.close()

        async def handle(reader, writer):
            try:
                br, bw = await asyncio.open_connection("127.0.0.1", self.backend_port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, bw), pipe(br, writer))

        async def main():
            self.server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
            self.port = self.server.sockets[0].getsockname()[1]
            started.set()

        def run():
            self.loop.run_until_complete(main())
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(10)

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def token_setup(tmp_path_factory, sample_dir, certs):
    if NEARPREPD is None:
        pytest.skip("nearprepd not built")
    work = tmp_path_factory.mktemp("authz-token")
    tokens = work / "tokens.sha256"
    tokens.write_text(
        "# name sha256(token)\n"
        f"ci {hashlib.sha256(TOKEN_CI.encode()).hexdigest()}\n"
        f"old {hashlib.sha256(TOKEN_REVOKED.encode()).hexdigest()}\n")
    d = Daemon(work, {}, name="plain", workers=2)
    d.audit = work / "audit.jsonl"
    _write_config(d, sample_dir, _policy(d.audit, teams=(), token_file=tokens))
    d.start()
    relay = TlsRelay(certs / "server.pem", certs / "server.key", d.port)
    yield d, relay, work
    relay.close()
    d.stop()


def _via_relay(relay, certs, **kw):
    return nearprep.Client(f"127.0.0.1:{relay.port}", tls=(certs / "ca.pem").read_bytes(),
                           rpc_timeout=5, reconnect_deadline=1, initial_backoff=0.05,
                           native=False, **kw)


def test_token_through_tls_terminating_relay(token_setup, certs, monkeypatch):
    d, relay, work = token_setup
    token_file = work / "ci.token"
    token_file.write_text(TOKEN_CI + "\n")
    with _via_relay(relay, certs, token_file=str(token_file)) as c:
        assert len(_one_batch(c, "beta").sample_ids) == 4
        with pytest.raises(nearprep.PermissionDeniedError, match="'token:ci'"):
            _one_batch(c, "alpha")
        assert [x.name for x in c.datasets()] == ["beta"]
    # From the environment, as a launcher would set it.
    monkeypatch.setenv("NEARPREP_TOKEN", TOKEN_CI)
    with _via_relay(relay, certs) as c:
        assert len(_one_batch(c, "beta").sample_ids) == 4
    monkeypatch.delenv("NEARPREP_TOKEN")
    audit = open(d.audit).read()
    assert '"identity":"token:ci"' in audit
    assert TOKEN_CI not in audit and TOKEN_CI not in open(d.log).read()


def test_wrong_or_missing_token_is_unauthenticated(token_setup, certs, monkeypatch):
    d, relay, _ = token_setup
    monkeypatch.delenv("NEARPREP_TOKEN", raising=False)
    monkeypatch.delenv("NEARPREP_TOKEN_FILE", raising=False)
    with _via_relay(relay, certs, token="not-a-known-token") as c:
        with pytest.raises(nearprep.UnauthenticatedError) as e:
            _one_batch(c, "beta")
        assert "not-a-known-token" not in e.value.details
        with pytest.raises(nearprep.UnauthenticatedError):
            c.datasets()
    with _via_relay(relay, certs) as c:
        with pytest.raises(nearprep.UnauthenticatedError, match="no client identity"):
            _one_batch(c, "beta")
    assert "not-a-known-token" not in open(d.log).read()
    assert '"decision":"unauthenticated"' in open(d.audit).read()


def test_cli_sends_token_from_file_in_environment(token_setup, certs, tmp_path):
    if not CLI:
        pytest.skip("NEARPREP_CLI not set")
    d, relay, _ = token_setup
    token_file = tmp_path / "t"
    token_file.write_text(TOKEN_CI + "\n")
    base = [CLI, "stream", "--target", f"127.0.0.1:{relay.port}", "--tls-ca",
            str(certs / "ca.pem"), "--dataset", "beta", "--batch-size", "2",
            "--max-batches", "1", "--height", "16", "--width", "16",
            "--reconnect-deadline", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARPREP_TOKEN")}
    ok = subprocess.run(base, env={**env, "NEARPREP_TOKEN_FILE": str(token_file)},
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(base, env={**env, "NEARPREP_TOKEN": "wrong"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "UNAUTHENTICATED" in bad.stderr + bad.stdout


def test_sighup_revokes_a_team_mid_stream_and_bad_reload_keeps_policy(
        tmp_path, sample_dir, certs):
    d = Daemon(tmp_path, {}, name="reload", workers=1)
    audit = tmp_path / "audit.jsonl"
    _write_config(d, sample_dir, _policy(audit), tls=certs)
    d.start()
    try:
        # 40 batches of 64x64: more than HTTP/2's windows and the prefetch
        # hold, so the daemon is still producing when the reload comes.
        big = dict(ARGS, height=64, width=64)
        a = _client(d, certs, "team-a", prefetch=1)
        total = len(list(a.batches("alpha", max_batches=40, **big)))
        assert total == 40
        stream = iter(a.batches("alpha", max_batches=40, **big))
        first = next(stream)
        assert len(first.sample_ids) == 4
        # Revoke team A and reload while its stream is open.
        _write_config(d, sample_dir, _policy(audit, teams=("b",)), tls=certs)
        mark = _log_size(d)
        d.proc.send_signal(signal.SIGHUP)
        _wait_log(d, "authorization policy reloaded", mark)
        rest = list(stream)          # the open stream finishes...
        assert 1 + len(rest) == total
        with pytest.raises(nearprep.PermissionDeniedError, match="'alpha'"):
            _one_batch(a, "alpha")   # ...its next one is denied
        assert [x.name for x in a.datasets()] == []
        a.close()

        # A policy file with a syntax error: logged, the old policy stays.
        with open(d.config, "a") as f:
            f.write("    - name: [unclosed\n")
        mark = _log_size(d)
        d.proc.send_signal(signal.SIGHUP)
        log = _wait_log(d, "NOT reloaded", mark)
        assert "not valid YAML" in log[mark:] and d.config in log[mark:]
        assert d.proc.poll() is None
        with _client(d, certs, "team-b") as b:
            assert len(_one_batch(b, "beta").sample_ids) == 4
        with _client(d, certs, "team-a") as a2:
            with pytest.raises(nearprep.PermissionDeniedError):
                _one_batch(a2, "alpha")
    finally:
        d.stop()


def test_audit_log_on_a_full_disk_is_counted_logged_and_may_fail_closed(
        tmp_path, sample_dir, certs):
    # /dev/full: every write is ENOSPC, as on a full disk. Fail-open (the
    # default): streams are served, every lost record counted, the daemon's
    # log says so once (not once per record, not never). Reloaded with
    # audit_fail_closed: streams are refused with UNAVAILABLE.
    d = Daemon(tmp_path, {}, name="audit-full", workers=1,
               extra=["--metrics-listen", "127.0.0.1:0",
                      "--metrics-port-file", str(tmp_path / "metrics-port")])
    d.metrics_file = tmp_path / "metrics-port"
    _write_config(d, sample_dir, _policy("/dev/full"), tls=certs)
    d.start()
    try:
        with _client(d, certs, "team-a") as a:
            for _ in range(3):
                assert len(_one_batch(a, "alpha").sample_ids) == 4
        assert _metric(d, "nearprep_authz_audit_write_failures_total") == 3
        assert _metric(d, "nearprep_authz_audit_refusals_total") == 0
        log = _wait_log(d, "cannot be written")
        assert log.count("cannot be written") == 1
        assert "No space left on device" in log and "served unaudited" in log

        text = open(d.config).read().replace(
            "  audit_log: /dev/full\n",
            "  audit_log: /dev/full\n  audit_fail_closed: true\n", 1)
        open(d.config, "w").write(text)
        mark = _log_size(d)
        d.proc.send_signal(signal.SIGHUP)
        _wait_log(d, "authorization policy reloaded", mark)
        with _client(d, certs, "team-a") as a:
            with pytest.raises(nearprep.NearprepError) as e:
                _one_batch(a, "alpha")
            assert e.value.code == "UNAVAILABLE"
            assert "audit log cannot be written" in str(e.value)
        assert _metric(d, "nearprep_authz_audit_refusals_total") >= 1
        assert d.proc.poll() is None
    finally:
        d.stop()


def _listen_addresses(pid, port):
    """Local addresses (hex as in /proc/net/tcp*) of LISTEN sockets on `port`."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            lines = open(f"/proc/{pid}/net/{name}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            addr, p = f[1].rsplit(":", 1)
            if f[3] == "0A" and int(p, 16) == port:
                found.append(addr)
    return found


def test_default_listen_is_loopback_without_tls_and_plaintext_elsewhere_warns(
        tmp_path, sample_dir, certs):
    d = Daemon(tmp_path, {}, name="default-listen", workers=1)
    with open(d.config, "w") as f:   # no `listen:`, no TLS
        f.write(f"log_level: info\ndatasets:\n  - name: s\n    format: image_folder\n    root: {sample_dir}\n")
    d.start()
    try:
        # 127.0.0.1, as IPv4 or as the IPv4-mapped IPv6 address gRPC may use.
        addrs = _listen_addresses(d.proc.pid, d.port)
        assert addrs and set(addrs) <= {"0100007F", "0000000000000000FFFF00000100007F"}, addrs
        assert "PLAINTEXT" not in open(d.log).read()
    finally:
        d.stop()
    d2 = Daemon(tmp_path, {}, name="any-plain", workers=1, extra=["--listen", "0.0.0.0"])
    with open(d2.config, "w") as f:
        f.write(f"datasets:\n  - name: s\n    format: image_folder\n    root: {sample_dir}\n")
    d2.start()
    try:
        addrs = _listen_addresses(d2.proc.pid, d2.port)
        assert addrs and all(set(a) == {"0"} for a in addrs), addrs   # wildcard
        assert "serving PLAINTEXT on 0.0.0.0" in open(d2.log).read()
    finally:
        d2.stop()
    # With TLS and no `listen:` the daemon listens on every address, as before.
    d3 = Daemon(tmp_path, {}, name="tls-any", workers=1)
    with open(d3.config, "w") as f:
        f.write(f"tls:\n  cert: {certs / 'server.pem'}\n  key: {certs / 'server.key'}\n"
                f"datasets:\n  - name: s\n    format: image_folder\n    root: {sample_dir}\n")
    d3.start()
    try:
        addrs = _listen_addresses(d3.proc.pid, d3.port)
        assert addrs and all(set(a) == {"0"} for a in addrs), addrs
        assert "PLAINTEXT" not in open(d3.log).read()
    finally:
        d3.stop()


def test_bad_policy_at_start_exits_2_naming_the_key(tmp_path, sample_dir):
    if NEARPREPD is None:
        pytest.skip("nearprepd not built")
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(f"datasets:\n  - name: s\n    format: image_folder\n    root: {sample_dir}\n"
                   "authorization:\n  rules:\n    - identities: [x]\n"
                   "      datasets: [s]\n      operations: [write]\n")
    p = subprocess.run([NEARPREPD, "--config", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2
    assert "authorization.rules[0].operations[0]: unknown operation 'write'" in p.stderr
    cfg.write_text(f"datasets:\n  - name: s\n    format: image_folder\n    root: {sample_dir}\n"
                   "authorization:\n  token_file: /nonexistent/tokens\n")
    p = subprocess.run([NEARPREPD, "--config", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "/nonexistent/tokens" in p.stderr


def test_fleet_client_sends_the_token_to_every_node(tmp_path, certs):
    """nearprep.fleet.FleetClient(token=...) reaches two nodes, each with a
    policy that knows only that token; the explicit-id streams are audited
    under its identity on both."""
    if not CLI or NEARPREPD is None:
        pytest.skip("NEARPREP_CLI / nearprepd not built")
    from nearprep import fleet_plan as fp
    from nearprep.fleet import FleetClient

    def run(*args):
        subprocess.run([CLI, *args], check=True, capture_output=True, text=True, timeout=120)

    src, shards = str(tmp_path / "src"), str(tmp_path / "shards")
    run("mkdataset", "--out", src, "--classes", "2", "--per-class", "6")
    run("pack", "--source", src, "--out", shards, "--format", "tfrecord",
        "--shard-size", "16KiB")
    manifest = str(tmp_path / "ds.nearprep-manifest")
    run("manifest", "--root", shards, "--format", "tfrecord", "--partitions", "2",
        "--out", manifest)
    m = fp.load_manifest(manifest)
    total = m.num_samples
    roots = []
    for p in range(2):   # node n1 holds partition 0, n2 partition 1
        root = tmp_path / f"root{p}"
        root.mkdir()
        for sh in m.shards[m.partition_shard[p]:m.partition_shard[p + 1]]:
            os.link(os.path.join(shards, sh.name), root / sh.name)
        roots.append(root)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"ci {hashlib.sha256(TOKEN_CI.encode()).hexdigest()}\n")
    nodes = []
    try:
        for name, root in zip(("n1", "n2"), roots):
            d = Daemon(tmp_path, {}, name=name, workers=1)
            d.audit = tmp_path / f"{name}.audit.jsonl"
            with open(d.config, "w") as f:
                f.write(f"listen: 127.0.0.1\ndatasets:\n  - name: ds\n    format: tfrecord\n"
                        f"    root: {root}\n    manifest: {manifest}\n"
                        f"authorization:\n  token_file: {tokens}\n  audit_log: {d.audit}\n"
                        "  rules:\n    - {identities: ['token:ci'], datasets: [ds]}\n")
            nodes.append(d.start())
        def on_wait(message):   # a node refused (no token): fail, do not wait
            raise AssertionError(f"the fleet client waits: {message}")

        with FleetClient([d.target for d in nodes], "ds", manifest=manifest, seed=1,
                         block_samples=2, global_batch=4, height=16, width=16,
                         dtype="uint8", token=TOKEN_CI, native=False,
                         on_wait=on_wait) as fc:
            got = sum(len(b.sample_ids) for b in fc.epoch(0))
        assert got == total

        def check_audits():
            for d in nodes:
                records = [json.loads(line) for line in open(d.audit)]
                assert records and all(r["identity"] == "token:ci" and r["decision"] == "allow"
                                       for r in records), records
                open(d.audit, "w").close()

        check_audits()
        # The C++ FleetClient (`nearprep fleet-read`), the token from the
        # environment: FleetClientOptions::credentials reach both nodes.
        token_file = tmp_path / "ci.token"
        token_file.write_text(TOKEN_CI + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("NEARPREP_TOKEN")}
        try:
          p = subprocess.run([CLI, "fleet-read", "--targets", ",".join(d.target for d in nodes),
                            "--manifest", manifest, "--seed", "1", "--block", "2",
                            "--global-batch", "4", "--height", "16", "--width", "16",
                            "--dtype", "uint8"],
                           env={**env, "NEARPREP_TOKEN_FILE": str(token_file)},
                           capture_output=True, text=True, timeout=15)
        except subprocess.TimeoutExpired as e:
          raise AssertionError(str(e.stderr)[:1500] + open(nodes[0].audit).read()[-3000:])
        assert p.returncode == 0, p.stderr
        assert len(p.stdout.splitlines()) == total
        check_audits()
    finally:
        for d in nodes:
            d.stop()


def test_native_receive_path_sends_the_token(token_setup, monkeypatch):
    """The native module (C++ client) sends the token too: straight to the
    plaintext daemon on loopback, as a client beside a local proxy would."""
    from nearprep import transport as tr
    if tr.load_native() is None:
        pytest.skip("nearprep._native not built")
    monkeypatch.delenv("NEARPREP_TOKEN", raising=False)
    monkeypatch.delenv("NEARPREP_TOKEN_FILE", raising=False)
    d, _, _ = token_setup
    with nearprep.Client(d.target, token=TOKEN_CI, native=True) as c:
        assert c.transport == "native"
        assert len(_one_batch(c, "beta").sample_ids) == 4
    with nearprep.Client(d.target, token="wrong", native=True, reconnect_deadline=1) as c:
        with pytest.raises(nearprep.UnauthenticatedError):
            _one_batch(c, "beta")


def test_watchdog_keeps_pinging_under_a_deny_all_policy(tmp_path, sample_dir):
    """systemd's watchdog check is the daemon's own GetServerInfo call: a
    policy that denies everyone must not stop WATCHDOG=1 (nor fill the audit
    log with the daemon's own calls)."""
    import socket
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(10)
    d = Daemon(tmp_path, {}, name="watchdog", workers=1)
    audit = tmp_path / "audit.jsonl"
    with open(d.config, "w") as f:
        f.write(f"listen: 127.0.0.1\ndatasets:\n  - name: s\n    format: image_folder\n"
                f"    root: {sample_dir}\nauthorization:\n  audit_log: {audit}\n  rules: []\n")
    old = {k: os.environ.get(k) for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    os.environ.update(NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="400000")  # ping every 0.2 s
    try:
        d.start()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        got = []
        try:
            while got.count("WATCHDOG=1") < 3:
                got += sock.recv(4096).decode().split("\n")
        except socket.timeout:
            pass
        if not any(m.startswith("READY=1") for m in got):
            pytest.skip("nearprepd built without libsystemd: sends no notifications")
        assert got.count("WATCHDOG=1") >= 3, got
        # Everyone else is refused.
        with nearprep.Client(d.target, rpc_timeout=3) as c:
            with pytest.raises(nearprep.UnauthenticatedError):
                c.info()
        assert [json.loads(x)["operation"] for x in open(audit)] == ["info"]
    finally:
        d.stop()
        sock.close()
