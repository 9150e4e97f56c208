"""Plan v2 (nearprep-fleet-plan/2) end to end with both clients, on
test_fleet_daemons.py's fleet (3 daemons, C = 12 partitions on 2 replicas
each, G = 12, records that fail to decode): the Python FleetClient with
plan_version=2 (K = 2, L = 4), 3 trainers to a checkpoint, then 6 trainers
from it with node b SIGKILLed mid-step, to the end of the epoch: every
position exactly once, with the sample and bytes the v2 plan and a
whole-dataset daemon give, each trainer batch from at most K partitions
(T = 3: slices of L; T = 6: half slices; before the tails), and the checkpoint names
nearprep-fleet-plan/2 and L. The C++ client (`nearprep fleet-read
--plan-version 2`) reads the same epoch, 3 trainers, with the same result.
Plan v3 (nearprep-fleet-plan/3): both clients read epoch 2, 3 trainers
each, byte-exact against the v3 plan and the whole-dataset daemon.
"""

import hashlib
import threading

import numpy as np
import pytest

from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient
from test_fleet_daemons import (BLOCK, C, G, REQ, SEED, WINDOW, build_fleet, oracle_for,  # noqa: F401
                                pytestmark, revive, run, tfrecord_fleet)

K, L = 2, 4
V2 = dict(plan_version=2, slice_partitions=K, slice_samples=L)


def v2_oracle(oracle_d, manifest, m, epoch, version=2):
    """[(sample id, sha256 | error)] per position of the v2 (or v3) plan:
    the v1 oracle's bytes by id, the order from the Python plan."""
    by_id = dict(oracle_for(oracle_d, manifest, m, epoch))
    plan = fp.GlobalPlan.for_manifest(m, fp.PlanParams(
        seed=SEED, epoch=epoch, block_samples=BLOCK, window=WINDOW, global_batch=G,
        version=version, slice_partitions=K, slice_samples=L))
    return [(sid, by_id[sid]) for sid, _ in plan.range(0, len(plan))], plan


def test_python_client_v2_kill_and_trainer_change(tfrecord_fleet):
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    oracle, plan = v2_oracle(oracle_d, manifest, m, 1)
    targets = [d.target for d in daemons.values()]
    lock, got, dups, errors, wide = threading.Lock(), {}, [], [], []
    killed = threading.Event()

    def trainer(t, k, ckpt, stop):
        try:
            with FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                             window=WINDOW, global_batch=G, trainers=t, rank=k, prefetch=2,
                             rpc_timeout=20.0, probe_interval=0.2, **V2, **REQ) as fc:
                for fb in fc.resume(ckpt, stop_batch=stop):
                    recs = [(p, sid, hashlib.sha256(
                        np.ascontiguousarray(fb.images[i]).tobytes()).hexdigest())
                        for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids))]
                    recs += [(e.position, e.sample_id, f"error:{e.code}") for e in fb.errors]
                    parts = {plan.at(p)[1] for p, _, _ in recs}
                    with lock:  # the bound holds before the tails (N_main)
                        if len(parts) > K and max(p for p, _, _ in recs) < plan.n_main:
                            wide.append((t, k, fb.batch, parts))
                        for p, sid, h in recs:
                            if p in got:
                                dups.append(p)
                            got[p] = (sid, h)
                    if t == 6 and k == 0 and fb.batch == 6 and not killed.is_set():
                        killed.set()
                        daemons["b"].kill()
        except Exception as e:  # reported below
            errors.append((t, k, repr(e)))

    def phase(t, ckpt, stop):
        threads = [threading.Thread(target=trainer, args=(t, k, ckpt, stop)) for k in range(t)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=90)
        assert not any(th.is_alive() for th in threads), "a trainer hung"
        assert not errors, errors

    with FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                     window=WINDOW, global_batch=G, trainers=3, rank=0, **V2, **REQ) as fc:
        ck = fc.checkpoint(1, 0)
        assert ck.to_dict()["algorithm"] == "nearprep-fleet-plan/2"
        assert (ck.slice_partitions, ck.slice_samples) == (K, L)
        mid = fc.checkpoint(1, 4)
        v1 = fp.Checkpoint(m.hash, SEED, BLOCK, WINDOW, G, C, 1, 4)
        with pytest.raises(ValueError, match="differs"):
            list(fc.resume(v1, stop_batch=5))
    phase(3, ck, 4)
    phase(6, fp.Checkpoint.from_dict(mid.to_dict()), None)
    assert killed.is_set()
    assert not dups, dups[:5]
    assert not wide, wide[:5]
    assert sorted(got) == list(range(m.num_samples))
    bad = [p for p in range(m.num_samples) if got[p] != oracle[p]]
    assert not bad, [(p, got[p], oracle[p]) for p in bad[:3]]


def test_cpp_client_v2_matches_oracle(tfrecord_fleet):
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    oracle, _ = v2_oracle(oracle_d, manifest, m, 1)
    targets = ",".join(d.target for d in daemons.values())
    got = {}
    for k in range(3):
        out = run("fleet-read", "--targets", targets, "--manifest", manifest, "--seed", str(SEED),
                  "--block", str(BLOCK), "--window", str(WINDOW), "--global-batch", str(G),
                  "--trainers", "3", "--trainer", str(k), "--epoch", "1", "--plan-version", "2",
                  "--slice-partitions", str(K), "--height", "24", "--width", "24", "--crop",
                  "random_resized", "--flip", "0.5", "--dtype", "uint8")
        for line in out.split("\n")[:-1]:
            e, p, sid, h = line.split()
            assert (int(e), int(p)) not in got
            got[(int(e), int(p))] = (int(sid), h)
    assert sorted(got) == [(1, p) for p in range(m.num_samples)]
    bad = [p for p in range(m.num_samples) if got[(1, p)] != oracle[p]]
    assert not bad, [(p, got[(1, p)], oracle[p]) for p in bad[:3]]


def test_both_clients_read_a_v3_epoch_byte_exact(tfrecord_fleet):
    _, m, manifest, daemons, oracle_d = tfrecord_fleet
    revive(daemons)
    oracle, plan = v2_oracle(oracle_d, manifest, m, 2, version=3)
    assert [s for s, _ in oracle] != [s for s, _ in v2_oracle(oracle_d, manifest, m, 2)[0]]
    targets = [d.target for d in daemons.values()]
    got = {}
    for k in range(3):  # Python, one trainer after another (no node is killed)
        with FleetClient(targets, "ds", manifest=manifest, seed=SEED, block_samples=BLOCK,
                         window=WINDOW, global_batch=G, trainers=3, rank=k, rpc_timeout=20.0,
                         plan_version=3, slice_partitions=K, **REQ) as fc:
            assert fc.checkpoint(2, 0).algorithm == "nearprep-fleet-plan/3"
            for fb in fc.epoch(2):
                recs = [(p, sid, hashlib.sha256(
                    np.ascontiguousarray(fb.images[i]).tobytes()).hexdigest())
                    for i, (p, sid) in enumerate(zip(fb.positions, fb.sample_ids))]
                recs += [(e.position, e.sample_id, f"error:{e.code}") for e in fb.errors]
                if recs and max(p for p, _, _ in recs) < plan.n_main:
                    assert len({plan.at(p)[1] for p, _, _ in recs}) <= K
                for p, sid, h in recs:
                    assert p not in got
                    got[p] = (sid, h)
    assert sorted(got) == list(range(m.num_samples))
    bad = [p for p in range(m.num_samples) if got[p] != oracle[p]]
    assert not bad, [(p, got[p], oracle[p]) for p in bad[:3]]
    got = {}
    for k in range(3):  # C++
        out = run("fleet-read", "--targets", ",".join(targets), "--manifest", manifest,
                  "--seed", str(SEED), "--block", str(BLOCK), "--window", str(WINDOW),
                  "--global-batch", str(G), "--trainers", "3", "--trainer", str(k), "--epoch",
                  "2", "--plan-version", "3", "--slice-partitions", str(K), "--height", "24",
                  "--width", "24", "--crop", "random_resized", "--flip", "0.5", "--dtype",
                  "uint8")
        for line in out.split("\n")[:-1]:
            e, p, sid, h = line.split()
            assert (int(e), int(p)) not in got
            got[(int(e), int(p))] = (int(sid), h)
    assert sorted(got) == [(2, p) for p in range(m.num_samples)]
    bad = [p for p in range(m.num_samples) if got[(2, p)] != oracle[p]]
    assert not bad, [(p, got[(2, p)], oracle[p]) for p in bad[:3]]
