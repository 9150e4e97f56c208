"""torch DDP with the fleet adapter (nearprep.fleet_torch, issue 35): 2 gloo
ranks on loopback with torchrun's environment, FleetIterableDataset made
without rank= / world_size= (so from torch.distributed / $RANK), through
FleetDataLoader with 0 and 2 workers, a tiny DDP model, 2 epochs. Per global
batch the ranks' slices are disjoint and together the whole global batch
(against a one-trainer run in this process), every epoch complete, the two
epochs different; the ranks' models end equal."""

import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")

from conftest import NEARPREPD, ROOT, fleet_daemon, kill_process_groups  # noqa: E402
from test_torch_ddp import _free_port  # noqa: E402

CLI = os.environ.get("NEARPREP_CLI") or os.path.join(ROOT, "build", "client", "cpp", "nearprep")
pytestmark = pytest.mark.skipif(not (NEARPREPD and os.access(CLI, os.X_OK)),
                                reason="nearprep CLI or nearprepd not built")

G, SEED, BLOCK, WINDOW = 8, 7, 3, 5
REQ = dict(height=16, width=16, dtype="uint8", crop="random_resized", flip_probability=0.5)

RANK_SCRIPT = r'''
import hashlib, json, os, sys
import torch
import torch.distributed as dist
import nearprep.fleet_torch as nft


def main():
    dist.init_process_group("gloo")
    kw = json.loads(os.environ["FLEET_KW"])
    ds = nft.FleetIterableDataset(os.environ["TARGET"], "ds", manifest=os.environ["MANIFEST"],
                                  **kw)
    workers = int(os.environ["NUM_WORKERS"])
    loader = nft.FleetDataLoader(ds, num_workers=workers, persistent_workers=workers > 0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16 * 16 * 3, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    log = open(os.environ["LOG"], "w")
    for epoch in range(2):
        ds.set_epoch(epoch)
        for images, labels in loader:
            st = ds.state_dict()
            log.write(json.dumps({"rank": [ds.rank, ds.world_size], "epoch": st["epoch"],
                                  "next": st["next_batch"],
                                  "samples": [hashlib.sha256(images[k].numpy().tobytes())
                                              .hexdigest()[:16] for k in range(len(labels))]})
                      + "\n")
            loss = torch.nn.functional.cross_entropy(model(images.flatten(1).float() / 255),
                                                     labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(model.state_dict(), os.environ["LOG"] + ".pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddpfleet")
    run = lambda *a: subprocess.run([CLI, *a], check=True, capture_output=True)  # noqa: E731
    src, shards = str(tmp / "src"), str(tmp / "shards")
    run("mkdataset", "--out", src, "--classes", "3", "--per-class", "16")
    run("pack", "--source", src, "--out", shards, "--format", "tfrecord",
        "--shard-size", "64KiB")
    manifest = str(tmp / "ds.nearprep-manifest")
    run("manifest", "--root", shards, "--format", "tfrecord", "--partitions", "4",
        "--out", manifest)
    d = fleet_daemon(tmp, "node", shards, manifest=manifest).start()
    yield tmp, d, manifest
    d.kill()


def _one_trainer(d, manifest, epoch):
    """{global batch: [sample hash]} of a one-trainer run of `epoch`."""
    from nearprep.fleet_torch import FleetIterableDataset
    ds = FleetIterableDataset(d.target, "ds", manifest=manifest, rank=0, world_size=1,
                              seed=SEED, block_samples=BLOCK, window=WINDOW, global_batch=G,
                              **REQ)
    ds.set_epoch(epoch)
    out = {}
    for g, (images, _) in enumerate(ds):  # global batches 0, 1, ... in order
        out[g] = [
            hashlib.sha256(np.ascontiguousarray(images[k].numpy()).tobytes()).hexdigest()[:16]
            for k in range(images.shape[0])]
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_fleet_ddp_two_ranks(fleet, tmp_path, workers):
    tmp, d, manifest = fleet
    script = str(tmp_path / "rank.py")
    open(script, "w").write(RANK_SCRIPT)
    port = _free_port()
    kw = dict(seed=SEED, block_samples=BLOCK, window=WINDOW, global_batch=G, **REQ)
    procs, logs = [], []
    for r in range(2):
        log = str(tmp_path / f"rank{r}.log")
        logs.append(log)
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TARGET=d.target,
                   MANIFEST=manifest, FLEET_KW=json.dumps(kw), NUM_WORKERS=str(workers),
                   LOG=log, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, script], env=env, cwd=str(tmp_path),
                                      stdout=open(log + ".out", "w"), stderr=subprocess.STDOUT,
                                      start_new_session=True))
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.1)
    finally:
        kill_process_groups(procs)
    for p, log in zip(procs, logs):
        assert p.returncode == 0, open(log + ".out").read()[-3000:]
    got = [[json.loads(line) for line in open(log)] for log in logs]
    for r in range(2):
        assert {tuple(e["rank"]) for e in got[r]} == {(r, 2)}
    per_epoch = []
    for epoch in range(2):
        whole = _one_trainer(d, manifest, epoch)

        def where(e):  # (epoch, global batch) of a logged item
            if e["next"] == 0:  # the epoch's last batch: the state names the next epoch
                return e["epoch"] - 1, len(whole) - 1
            return e["epoch"], e["next"] - 1

        for r in range(2):
            assert len([e for e in got[r] if where(e)[0] == epoch]) == len(whole)
        for g, samples in whole.items():
            parts = [[h for e in got[r] if where(e) == (epoch, g)
                      for h in e["samples"]] for r in range(2)]
            assert not set(parts[0]) & set(parts[1]), f"epoch {epoch} batch {g}: overlap"
            assert sorted(parts[0] + parts[1]) == sorted(samples), f"epoch {epoch} batch {g}"
        per_epoch.append([h for g in sorted(whole) for h in whole[g]])
    assert per_epoch[0] != per_epoch[1]
    assert not set(per_epoch[0]) & set(per_epoch[1])  # other augmentation draws
    m = [torch.load(log + ".pt") for log in logs]
    for k, v in m[0].items():
        assert torch.equal(v, m[1][k]), k
