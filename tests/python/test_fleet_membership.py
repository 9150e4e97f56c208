"""Fleet membership from the orchestrator (issue 31, item 4): both fleet
clients take the node set from a DNS name or a targets file and follow it
between batches (client/cpp/fleet/membership.h,
nearprep/fleet_membership.py; docs/operations.md, "Fleet membership").

Two daemons serve the same fleet dataset (every partition on each) on the
same port of two loopback addresses, 127.0.0.2 and 127.0.0.3 (a headless
Service's pods: one port, one address each). One trainer reads an epoch
while the node set changes under it: {a} -> {b} (a removed mid-epoch, b
added) -> {a} (a back, b removed). Each change must be taken between
batches through the dead-node and rejoin paths: a removed node gets no
request after its removal (its daemon's nearprep_samples_sent_total stays
put), an added or returning node is used after it appears (its count
grows), and the epoch is exactly once, byte for byte the clean read, in
the plan's order (`nearprep fleet-plan`).

The C++ client (`nearprep fleet-read`) resolves the name for real: glibc's
resolver (res_nsearch) asks a DNS stub server (dns_stub.py, RFC 1035, UDP
on loopback) through `--dns-server`, the stub's answer changes mid-epoch;
and reads a targets file rewritten mid-epoch. The Python client reads a
targets file rewritten mid-epoch, and a DNS name through an injected
resolver (socket.getaddrinfo, its default, cannot be pointed at a stub
server).
"""

import hashlib
import os
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient
from nearprep.fleet_membership import Membership, parse_targets_file
from conftest import fleet_daemon, metrics_value
from dns_stub import DnsStub
from test_fleet_faults import CLI, CPP_REQ, PY_REQ, make_fleet_dataset, read_cpp, run

# As test_fleet_faults (read_cpp, the clean read, uses its values).
SEED, BLOCK, WINDOW, G, C = 77, 2, 4, 8, 4
EPOCH = 1
NAME = "fleet.nearprep.test"
ADDRS = ("127.0.0.2", "127.0.0.3")

pytestmark = pytest.mark.skipif(not CLI, reason="nearprep CLI not built")


def sent(d):
    """Samples daemon d has sent since the test began (Daemon.base)."""
    return metrics_value(d, "nearprep_samples_sent_total", {"dataset": "ds"}) - d.base


def zero_counts(daemons):
    for d in daemons:
        d.base = 0
        d.base = sent(d)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """(manifest, [daemon a, daemon b], port, clean {position: (sid, sha)},
    plan [sid in position order])."""
    tmp = tmp_path_factory.mktemp("membership")
    shards, manifest = make_fleet_dataset(tmp, 48, C)  # 96 samples: 12 batches
    m = fp.load_manifest(manifest)
    daemons, port = [], 0
    try:
        for addr, name in zip(ADDRS, "ab"):
            d = fleet_daemon(tmp, name, shards, manifest=manifest)
            text = open(d.config).read().replace("listen: 127.0.0.1", f"listen: {addr}")
            open(d.config, "w").write(text)
            d.start(port=port)
            port = d.port
            d.addr = f"{addr}:{port}"
            daemons.append(d)
        clean = read_cpp([d.addr for d in daemons], manifest)
        assert clean["ok"] and len(clean["got"]) == m.num_samples, clean
        lines = run("fleet-plan", "--manifest", manifest, "--seed", str(SEED), "--epoch",
                    str(EPOCH), "--block", str(BLOCK), "--window", str(WINDOW),
                    "--global-batch", str(G)).split("\n")[:-1]
        plan = [int(line.split()[1]) for line in lines if not line.startswith("#")]
        assert sorted(plan) == list(range(m.num_samples))
        yield manifest, daemons, port, clean["got"], plan
    finally:
        for d in daemons:
            d.kill()


# -- the parts alone -------------------------------------------------------------


def test_targets_file_syntax():
    text = "# the fleet\n127.0.0.3:7070  # b\n\n  127.0.0.2:7070\n127.0.0.3:7070\n"
    assert parse_targets_file(text) == ["127.0.0.2:7070", "127.0.0.3:7070"]
    for bad, line in (("127.0.0.2:7070\nnoport\n", 2), ("a:1 b:2\n", 1), ("a:1,b:2", 1)):
        with pytest.raises(ValueError, match=f"line {line}:"):
            parse_targets_file(bad)


def test_dns_membership_follows_the_resolver_and_keeps_the_set_on_failure():
    answer = {"v": ["10.0.0.2", "10.0.0.1"]}
    events = []

    def resolver(name, port, type=0):
        assert name == NAME and port == 7070
        if answer["v"] is None:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in answer["v"]]

    m = Membership(dns=f"{NAME}:7070", interval=0.02, resolver=resolver, on_event=events.append)
    try:
        assert m.current() == (1, ["10.0.0.1:7070", "10.0.0.2:7070"])

        def wait_for(pred):
            deadline = time.monotonic() + 10
            while not pred(m.current()):
                assert time.monotonic() < deadline, m.current()
                time.sleep(0.01)

        answer["v"] = ["10.0.0.3"]
        wait_for(lambda c: c == (2, ["10.0.0.3:7070"]))
        answer["v"] = None  # a failing lookup keeps the set, reported once
        wait_for(lambda c: events)
        time.sleep(0.2)
        assert m.current() == (2, ["10.0.0.3:7070"])
        assert len(events) == 1 and "keeping the last answer" in events[0], events
        answer["v"] = []  # an empty answer too
        time.sleep(0.2)
        assert m.current() == (2, ["10.0.0.3:7070"])
        answer["v"] = ["10.0.0.3", "10.0.0.1"]
        wait_for(lambda c: c == (3, ["10.0.0.1:7070", "10.0.0.3:7070"]))
    finally:
        m.close()
    with pytest.raises(LookupError, match="no A or AAAA record"):
        Membership(dns=f"{NAME}:7070", resolver=lambda *a, **k: [])
    with pytest.raises(ValueError, match="NAME:PORT"):
        Membership(dns=NAME)


def test_cpp_refuses_a_bad_source_naming_it(fleet, tmp_path):
    manifest = fleet[0]
    bad = tmp_path / "targets"
    bad.write_text("127.0.0.2:7070\nnoport\n")
    stub = DnsStub({NAME: ["127.0.0.2"]})
    try:
        for source, want in (
                (["--targets-file", str(bad)], "--targets-file: " + str(bad) + ": line 2:"),
                (["--targets-file", str(tmp_path / "none")], "cannot read"),
                (["--targets-dns", f"other.nearprep.test:7070", "--dns-server", stub.server],
                 "--targets-dns: dns other.nearprep.test: no A or AAAA record"),
                (["--targets-dns", NAME], "expected NAME:PORT")):
            r = subprocess.run([CLI, "fleet-read", *source, "--manifest", manifest],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 1 and want in r.stderr, (source, r.stderr)
        assert stub.count("other.nearprep.test") >= 1  # asked the stub, not resolv.conf's
    finally:
        stub.close()
    r = subprocess.run([CLI, "fleet-read", "--targets", "127.0.0.2:1", "--targets-file",
                        str(bad), "--manifest", manifest], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "excludes" in r.stderr, r.stderr


# -- mid-epoch changes, real daemons -------------------------------------------------


class LiveRead:
    """`nearprep fleet-read` running, its stdout and stderr lines collected
    as they come."""

    def __init__(self, args):
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        self.out, self.err = [], []
        self.cv = threading.Condition()
        self.threads = [threading.Thread(target=self._pump, args=(f, into), daemon=True)
                        for f, into in ((self.p.stdout, self.out), (self.p.stderr, self.err))]
        for t in self.threads:
            t.start()

    def _pump(self, f, into):
        for line in f:
            with self.cv:
                into.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            into.append(None)  # closed
            self.cv.notify_all()

    def wait(self, what, pred, timeout=60):
        with self.cv:
            ok = self.cv.wait_for(lambda: pred() or self.p.poll() is not None and
                                  None in self.out and None in self.err, timeout)
            assert ok and pred(), f"{what}: not seen; stderr: {self.err[-20:]}"

    def events(self):
        return [e[len("event: "):] for e in self.err if e and e.startswith("event: ")]

    def event(self, text):
        return lambda: any(text in e for e in self.events())

    def batches(self):
        return sum(1 for line in self.out if line) // G


def scenario(read, set_members, a, b):
    """Drives one reader through {a} -> {b} -> {a} (the module docstring);
    `read` is a LiveRead started with {a}; set_members([daemon...]) changes
    the node set (DNS answer or targets file)."""
    read.wait("batch 1", lambda: read.batches() >= 1)
    assert sent(b) == 0
    set_members([b])
    read.wait("a removed", read.event(f"node {a.addr} removed by membership"))
    read.wait("b live", read.event(f"node {b.addr} is live again"))
    a_at_removal = sent(a)
    at = read.batches()
    read.wait("2 batches more", lambda: read.batches() >= at + 2)
    assert sent(a) == a_at_removal, "a removed node was asked for samples"
    assert sent(b) > 0, "the added node was not used"
    set_members([a])
    read.wait("a back", read.event(f"node {a.addr} added by membership"))
    read.wait("b removed", read.event(f"node {b.addr} removed by membership"))
    b_at_removal = sent(b)
    assert read.p.wait(timeout=120) == 0, read.err[-20:]
    for t in read.threads:
        t.join()
    assert sent(b) == b_at_removal, "a removed node was asked for samples"
    assert sent(a) > a_at_removal, "the returning node was not used"
    got = {}
    for line in read.out:
        if line:
            _, pos, sid, h = line.split()
            assert int(pos) not in got, line
            got[int(pos)] = (int(sid), h)
    stats = read.err[-2].split()
    return got, dict(zip(stats[::2], map(int, stats[1::2])))


def cpp_args(manifest, *source):
    return [CLI, "fleet-read", *source, "--manifest", manifest, "--seed", str(SEED),
            "--block", str(BLOCK), "--window", str(WINDOW), "--global-batch", str(G),
            "--epoch", str(EPOCH), "--prefetch", "1", "--step-ms", "250",
            "--membership-interval-ms", "50", *CPP_REQ]


def check_exact(got, clean, plan):
    assert got == clean  # every position once, the same bytes as a clean read
    assert [got[p][0] for p in sorted(got)] == plan


def test_cpp_dns_answer_changes_mid_epoch(fleet):
    manifest, (a, b), port, clean, plan = fleet
    zero_counts((a, b))
    stub = DnsStub({NAME: [ADDRS[0]]})
    try:
        read = LiveRead(cpp_args(manifest, "--targets-dns", f"{NAME}:{port}",
                                 "--dns-server", stub.server))
        try:
            got, stats = scenario(
                read, lambda ds: stub.set(NAME, [d.addr.split(":")[0] for d in ds]), a, b)
        finally:
            read.p.kill()
        assert stub.count(NAME) >= 3  # resolved again and again, not once
    finally:
        stub.close()
    check_exact(got, clean, plan)
    assert stats["failovers"] == 0, stats


def test_cpp_targets_file_rewritten_mid_epoch(fleet, tmp_path):
    manifest, (a, b), port, clean, plan = fleet
    zero_counts((a, b))
    path = tmp_path / "targets"
    path.write_text(f"# the fleet\n{a.addr}\n")

    def set_members(ds):
        tmp = tmp_path / "targets.new"
        tmp.write_text("".join(f"{d.addr}\n" for d in ds))
        os.replace(tmp, path)  # as a ConfigMap update or an operator's mv does

    read = LiveRead(cpp_args(manifest, "--targets-file", str(path)))
    try:
        got, stats = scenario(read, set_members, a, b)
    finally:
        read.p.kill()
    check_exact(got, clean, plan)
    assert stats["failovers"] == 0, stats


# -- the Python client ---------------------------------------------------------------


def py_epoch(manifest, set_members, a, b, targets=None, **source):
    """One Python trainer's epoch through {a} -> {b} -> {a}, one batch at a
    time: after batch 0 the set becomes {b}, after batch 4 {a} again; each
    change is waited for (the membership's generation) before the next
    batch. Returns ({position: (sid, sha)}, {batch: set of serving nodes},
    events)."""
    events = []
    if targets is None:
        source["membership_interval"] = 0.02
    fc = FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                     window=WINDOW, global_batch=G, prefetch=1, probe_interval=0.1,
                     on_event=events.append, **source, **PY_REQ)
    got, nodes = {}, {}
    try:
        it = fc.epoch(EPOCH)
        for g, batch in enumerate(it):
            for i, pos in enumerate(batch.positions):
                assert pos not in got
                data = np.ascontiguousarray(batch.images[i]).tobytes()
                got[pos] = (int(batch.sample_ids[i]), hashlib.sha256(data).hexdigest())
            nodes[g] = set(batch.served_by.values())
            change = {0: [b], 4: [a]}.get(g)
            if change:
                gen = fc._membership.current()[0]
                set_members(change)
                deadline = time.monotonic() + 10
                while fc._membership.current()[0] == gen:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
    finally:
        fc.close()
    return got, nodes, events


def check_py(got, nodes, events, clean, plan, a, b):
    check_exact(got, clean, plan)
    # prefetch=1: batch g+1 starts after batch g is yielded and the change
    # seen, so it is the first batch of the new set (its new node is probed
    # at once; the batch waits for that probe).
    assert len(nodes) == 12, nodes
    assert nodes[0] == {a.addr}, nodes
    assert all(nodes[g] == {b.addr} for g in (1, 2, 3, 4)), nodes
    assert all(nodes[g] == {a.addr} for g in range(5, 12)), nodes
    assert any(f"node {a.addr} removed by membership" in e for e in events), events
    assert any(f"node {b.addr} added by membership" in e for e in events), events
    assert any(f"node {a.addr} added by membership" in e for e in events), events


def test_python_targets_file_rewritten_mid_epoch(fleet, tmp_path):
    manifest, (a, b), port, clean, plan = fleet
    path = tmp_path / "targets"
    path.write_text(f"{a.addr}  # a\n")

    def set_members(ds):
        tmp = tmp_path / "targets.new"
        tmp.write_text("".join(f"{d.addr}\n" for d in ds))
        os.replace(tmp, path)

    got, nodes, events = py_epoch(manifest, set_members, a, b, targets_file=str(path))
    check_py(got, nodes, events, clean, plan, a, b)


def test_python_dns_answer_changes_mid_epoch(fleet):
    manifest, (a, b), port, clean, plan = fleet
    answer = {"v": [ADDRS[0]]}
    asked = []

    def resolver(name, p, type=0):
        assert name == NAME and p == port and type == socket.SOCK_STREAM
        asked.append(name)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (x, p)) for x in answer["v"]]

    members = Membership(dns=f"{NAME}:{port}", interval=0.02, resolver=resolver)
    got, nodes, events = py_epoch(
        manifest, lambda ds: answer.update(v=[d.addr.split(":")[0] for d in ds]), a, b,
        targets=members)
    assert len(asked) >= 3
    check_py(got, nodes, events, clean, plan, a, b)
