"""Versioned fleet placements (issue 14) with real daemons and the CLI.

`nearprep placement` computes a placement (C = 6 partitions on nodes a, b,
c, R = 2) and lists each node's shards (--shards-for), which are linked into
the node's root; node c gets all but one of its partitions. The daemons,
started with `placement:` / `node:`, report placement_version and
partitions_assigned; c reports the missing partition (and
nearprep_fleet_partitions{kind="missing"} says 1) and still serves only what
it holds. A placement for another manifest is refused at start. A
FleetClient over nodes at versions 1 and 2 reports the mixed versions
through on_event (so does the C++ client, `nearprep fleet-read`), each
node's version change as it is restarted on the new placement, and the
versions agreeing again; the data read is the plan's.
"""

import glob
import os
import socket
import subprocess

import pytest

import nearprep
from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient, choose
from conftest import NEARPREPD, ROOT, fleet_daemon, metrics_value

CLI = os.environ.get("NEARPREP_CLI") or next(
    iter(sorted(glob.glob(os.path.join(ROOT, "build*", "client", "cpp", "nearprep")))), None)
pytestmark = pytest.mark.skipif(not (CLI and NEARPREPD),
                                reason="nearprep CLI or nearprepd not built")

C = 6
NODES = ["a", "b", "c"]


def run(*args, check=True):
    p = subprocess.run([CLI, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"nearprep {' '.join(args)}: {p.returncode}\n{p.stderr}")
    return p


def start(tmp, name, root, manifest, placement=None, node=None):
    return fleet_daemon(tmp, name, root, manifest=manifest, placement=placement, node=node,
                        workers=1)


def gauge(d, kind):
    return metrics_value(d, "nearprep_fleet_partitions", {"dataset": "ds", "kind": kind})


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("placement")
    src, shards = str(tmp / "src"), str(tmp / "shards")
    run("mkdataset", "--out", src, "--classes", "2", "--per-class", "9")
    run("pack", "--source", src, "--out", shards, "--format", "tfrecord",
        "--shard-size", "16KiB")
    manifest = str(tmp / "ds.nearprep-manifest")
    run("manifest", "--root", shards, "--format", "tfrecord", "--partitions", str(C),
        "--out", manifest)
    m = fp.load_manifest(manifest)
    assert m.num_partitions == C, "too few shards for C partitions: lower --shard-size"
    p1, p2 = str(tmp / "v1.placement"), str(tmp / "v2.placement")
    out = run("placement", "--manifest", manifest, "--nodes", ",".join(NODES),
              "--replicas", "2", "--version", "1", "--out", p1).stdout
    assert "version 1, 3 nodes, 2 replicas of 6 partitions" in out, out
    # Version 2: the same nodes (no data moves), a new document.
    out = run("placement", "--manifest", manifest, "--nodes", ",".join(NODES),
              "--replicas", "2", "--version", "2", "--previous", p1, "--out", p2).stdout
    assert "partition copies to make: 0" in out, out
    assigned = {}
    for line in open(p1).read().splitlines():
        if line.startswith("node "):
            _, name, parts = line.split(" ")
            assigned[name] = [int(x) for x in parts.split(",")] if parts != "-" else []
    assert sorted(assigned) == NODES
    assert sorted(sum(assigned.values(), [])) == sorted(list(range(C)) * 2)
    # Copy each node's shards as --shards-for lists them; c misses its first
    # assigned partition.
    missing = assigned["c"][0]
    skip = {s.name for s in m.shards[m.partition_shard[missing]:m.partition_shard[missing + 1]]}
    roots = {}
    for node in NODES:
        names = run("placement", "--manifest", manifest, "--placement", p1,
                    "--shards-for", node).stdout.split()
        want = [s.name for p in assigned[node]
                for s in m.shards[m.partition_shard[p]:m.partition_shard[p + 1]]]
        assert names == want
        root = tmp / f"node-{node}"
        root.mkdir()
        for n in names:
            if not (node == "c" and n in skip):
                os.link(os.path.join(shards, n), root / n)
        roots[node] = str(root)
    started = []
    yield dict(tmp=tmp, manifest=manifest, m=m, p1=p1, p2=p2, assigned=assigned,
               missing=missing, roots=roots, shards=shards, started=started)
    for d in started:
        d.stop()


def test_cli_errors_name_the_flag(fleet):
    man, p1 = fleet["manifest"], fleet["p1"]
    out = str(fleet["tmp"] / "x.placement")
    cases = [
        (["--nodes", "a,b", "--replicas", "3", "--version", "1", "--out", out],
         "--replicas: R = 3 is more than the 2 nodes of --nodes"),
        (["--nodes", "a,b", "--replicas", "1", "--version", "1", "--previous", p1,
          "--out", out], "--version: version 1 is not greater than the previous placement's 1"),
        (["--placement", p1, "--shards-for", "zz"],
         "--shards-for: node 'zz' is not in the placement (nodes: a, b, c)"),
        (["--nodes", "a,a", "--replicas", "1", "--version", "1", "--out", out],
         "--nodes: 'a' is listed twice"),
        (["--nodes", "a,b", "--replicas", "1", "--version", "1", "--max-load", "0.9",
          "--out", out], "--max-load: F = 0.9 must be >= 1"),
    ]
    for args, want in cases:
        p = run("placement", "--manifest", man, *args, check=False)
        assert p.returncode != 0 and want in p.stderr, (args, p.stderr)
    assert not os.path.exists(out)
    # A placement for another manifest (another partition count).
    other = str(fleet["tmp"] / "other.nearprep-manifest")
    run("manifest", "--root", fleet["shards"], "--format", "tfrecord", "--partitions",
        str(C - 1), "--out", other)
    p = run("placement", "--manifest", other, "--placement", p1, "--shards-for", "a",
            check=False)
    assert p.returncode != 0 and "--placement: " + p1 + " is for manifest" in p.stderr, p.stderr


def test_bounded_load_placement(fleet):
    """--max-load: every partition still on R distinct nodes, no node past
    the cap it prints, a document the parser (--previous, --shards-for)
    accepts; a large F writes pure rendezvous' exact bytes."""
    man, tmp = fleet["manifest"], fleet["tmp"]
    nodes = [f"n{i}" for i in range(5)]
    pure, tight, big = (str(tmp / f"{n}.placement") for n in ("pure", "tight", "big"))
    run("placement", "--manifest", man, "--nodes", ",".join(nodes), "--replicas", "2",
        "--version", "1", "--out", pure)
    out = run("placement", "--manifest", man, "--nodes", ",".join(nodes), "--replicas", "2",
              "--version", "2", "--max-load", "1.5", "--previous", pure, "--out", tight).stdout
    # cap = ceil(1.5 * 6 * 2 / 5) = 4; 4 * (5 - 2) >= (6 - 1) * 2: never past it.
    assert "bounded load: cap 4 partitions per node (--max-load 1.5)" in out, out
    assert "partition copies to make:" in out, out
    held = {}
    for line in open(tight).read().splitlines():
        if line.startswith("node "):
            _, name, parts = line.split(" ")
            held[name] = [int(x) for x in parts.split(",")] if parts != "-" else []
    assert sorted(sum(held.values(), [])) == sorted(list(range(C)) * 2)
    assert max(len(v) for v in held.values()) <= 4, held
    assert run("placement", "--manifest", man, "--placement", tight,
               "--shards-for", "n0").returncode == 0
    run("placement", "--manifest", man, "--nodes", ",".join(nodes), "--replicas", "2",
        "--version", "1", "--max-load", "100", "--out", big)
    assert open(big).read() == open(pure).read()


def test_daemons_report_placement_and_missing_partitions(fleet):
    ds = {}
    for node in NODES:
        d = start(fleet["tmp"], f"r-{node}", fleet["roots"][node], fleet["manifest"],
                  fleet["p1"], node).start()
        fleet["started"].append(d)
        ds[node] = d
    for node, d in ds.items():
        with nearprep.Client(d.target, native=False) as c:
            fc_info = c.dataset("ds")
        assert fc_info.placement_version == 1
        assert list(fc_info.partitions_assigned) == fleet["assigned"][node]
        held = [p for p in fleet["assigned"][node]
                if not (node == "c" and p == fleet["missing"])]
        assert list(fc_info.partitions_held) == held
        assert gauge(d, "assigned") == len(fleet["assigned"][node])
        assert gauge(d, "held") == len(held)
        assert gauge(d, "missing") == (1 if node == "c" else 0)
    info = run("info", "--target", ds["c"].target).stdout
    assert (f"placement version 1: {len(fleet['assigned']['c'])} assigned, "
            f"missing [{fleet['missing']}]") in info, info
    log = open(ds["c"].log).read()
    assert (f"assigns node c partitions not held here (not served until their shards are "
            f"complete): [{fleet['missing']}]") in log, log[-2000:]
    for d in ds.values():
        d.stop()


def test_placement_for_another_manifest_is_refused_at_start(fleet):
    other = str(fleet["tmp"] / "other2.nearprep-manifest")
    run("manifest", "--root", fleet["shards"], "--format", "tfrecord", "--partitions",
        str(C - 2), "--out", other)
    wrong = str(fleet["tmp"] / "wrong.placement")
    run("placement", "--manifest", other, "--nodes", "a,b", "--replicas", "1",
        "--version", "1", "--out", wrong)
    d = start(fleet["tmp"], "wrong", fleet["roots"]["a"], fleet["manifest"], wrong, "a")
    with pytest.raises(RuntimeError) as e:
        d.start()
    msg = str(e.value)
    assert f"dataset 'ds': placement: {wrong} is for manifest" in msg, msg
    assert fleet["m"].hash in msg, msg
    d = start(fleet["tmp"], "stranger", fleet["roots"]["a"], fleet["manifest"],
              fleet["p1"], "zz")
    with pytest.raises(RuntimeError) as e:
        d.start()
    assert "dataset 'ds': node: 'zz' is not in placement" in str(e.value), str(e.value)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fleet_client_reports_a_rollout(fleet):
    # Ports such that a client trusting the placement (partitions_assigned)
    # instead of partitions_held would send c's missing partition to c: the
    # read below then shows failovers.
    # Every node's port is drawn again on each try: with the others' fixed,
    # a holder whose score is the highest of all that c's draws reach wins
    # every try (1 in 65 over 64 draws: the test failed so).
    missing = fleet["missing"]
    for _ in range(64):
        ports = {n: free_port() for n in NODES}
        holders = [f"127.0.0.1:{ports[n]}" for n in NODES if missing in fleet["assigned"][n]]
        if choose(missing, holders) == f"127.0.0.1:{ports['c']}":
            break
    else:
        pytest.fail("no port for c that wins the missing partition")
    ds = {}
    for node in NODES:
        # b is on version 2 already; a and c on version 1.
        pl = fleet["p2"] if node == "b" else fleet["p1"]
        d = start(fleet["tmp"], f"fc-{node}", fleet["roots"][node], fleet["manifest"], pl,
                  node).start(port=ports[node])
        fleet["started"].append(d)
        ds[node] = d
    events = []
    targets = [ds[n].target for n in NODES]
    m = fleet["m"]
    G = 6
    with FleetClient(targets, "ds", manifest=fleet["manifest"], seed=3, block_samples=2,
                     window=3, global_batch=G, height=16, width=16, dtype="uint8",
                     on_event=events.append) as fc:
        by = {ds[n].target: n for n in NODES}
        assert {by[t]: v for t, v in fc.placement_versions().items()} == \
            {"a": 1, "b": 2, "c": 1}
        mixed = [e for e in events if "placement versions differ" in e]
        assert len(mixed) == 1, events
        assert all(f"{ds[n].target}={v}" in mixed[0] for n, v in (("a", 1), ("b", 2), ("c", 1)))
        # The data is the plan's, and c never serves its missing partition.
        plan = fp.GlobalPlan.for_manifest(m, fp.PlanParams(
            seed=3, epoch=0, block_samples=2, window=3, global_batch=G))
        got = {}
        for b in fc.epoch(0):
            for p, sid in zip(b.positions, b.sample_ids):
                got[p] = sid
                if m.partition_of(sid) == fleet["missing"]:
                    assert b.served_by[p] != ds["c"].target
            for e in b.errors:
                got[e.position] = e.sample_id
        assert got == {p: plan.at(p)[0] for p in range(m.num_samples)}
        # Only holders were asked: no request failed over.
        assert fc.stats["failovers"] == 0, (fc.stats, events)
        # The C++ client (`nearprep fleet-read`) reports the same mix.
        r = run("fleet-read", "--targets", ",".join(targets), "--dataset", "ds",
                "--manifest", fleet["manifest"], "--seed", "3", "--block", "2", "--window", "3",
                "--global-batch", str(G), "--height", "16", "--width", "16",
                "--stop-batch", "1")
        want = ("event: placement versions differ across live nodes (rollout in progress): "
                + ", ".join(f"{ds[n].target}={v}" for n, v in (("a", 1), ("b", 2), ("c", 1))))
        assert want in r.stderr, r.stderr
        # Roll out: a, then c restart on version 2.
        events.clear()
        for n in ("a", "c"):
            ds[n].stop()
            with open(ds[n].config) as f:
                text = f.read()
            with open(ds[n].config, "w") as f:
                f.write(text.replace(fleet["p1"], fleet["p2"]))
            ds[n].start()
            fc.probe()
        assert f"{ds['a'].target}: placement version 1 -> 2" in events, events
        assert f"{ds['c'].target}: placement version 1 -> 2" in events, events
        assert events[-1] == "placement versions agree again: 2", events
        assert not [e for e in events if "placement versions differ" in e], events
        assert set(fc.placement_versions().values()) == {2}
