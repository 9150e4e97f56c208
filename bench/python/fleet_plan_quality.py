#!/usr/bin/python3
"""Locality and shuffle quality of the fleet plans, v1, v2 and v3 side by side
(docs/benchmarks.md, "Fleet plan v2: locality and shuffle quality").

    PYTHONPATH=client/python /usr/bin/python3 bench/python/fleet_plan_quality.py \
        [--samples 1281167] [--classes 1000] [--k 4] [--configs 8:1024:8,64:4096:32,...]

For each (C partitions, G, T) it computes whole epochs of the three plans (the
Python plan, nearprep.fleet_plan) over C balanced partitions and, as a
reference, a uniform random permutation of the same samples. The dataset is
laid out in the worst case for a partitioned plan: sample ids sorted by
class (ImageNet-like: --classes classes of equal size, consecutive ids), so a
partition holds a few classes only. Per plan it prints:

- nodes/trainer batch: distinct partitions (one partition per node) in a
  trainer's slice of G/T positions, median and max over the epoch;
- samples/request: samples of one partition in one trainer slice (one node
  request), median over requests;
- TV global / TV trainer: total variation distance between a batch's class
  histogram and the dataset's (0 = the dataset's class mix exactly), mean
  over global batches / over trainer batches;
- classes/trainer batch: distinct classes in a trainer batch, mean;
- consec. corr.: Pearson correlation of the class histograms of consecutive
  global batches, mean (a uniform shuffle gives about -1/(classes-1) ~ 0).

The uniform column is what an ideal global shuffle gives at the same sizes;
the numbers are deterministic (seed 0, epoch 0).
"""

import argparse
import time

import numpy as np

from nearprep import fleet_plan as fp


def balanced(n, c):
    return [(p + 1) * n // c - p * n // c for p in range(c)]


def starts(sizes):
    return np.concatenate([[0], np.cumsum(sizes)]).tolist()


def epoch_order(sizes, g, version, k=4, ll=0, seed=0):
    """(sample ids, partitions) of every position of epoch 0."""
    params = fp.PlanParams(seed=seed, epoch=0, block_samples=64, window=256, global_batch=g,
                           version=version, slice_partitions=k, slice_samples=ll)
    plan = fp.GlobalPlan(starts(sizes), params)
    out = plan.range(0, len(plan))
    return (np.fromiter((s for s, _ in out), np.int64, len(out)),
            np.fromiter((p for _, p in out), np.int64, len(out)))


def stats(ids, parts, classes_of, n_classes, g, t):
    """The figures above for one epoch order (full batches only)."""
    n = len(ids) // g * g
    per = g // t
    cls = classes_of[ids[:n]]
    want = np.bincount(classes_of, minlength=n_classes) / len(classes_of)
    gh = np.zeros((n // g, n_classes))
    np.add.at(gh, (np.repeat(np.arange(n // g), g), cls), 1)
    tv_global = 0.5 * np.abs(gh / g - want).sum(axis=1).mean()
    th = np.zeros((n // per, n_classes))
    np.add.at(th, (np.repeat(np.arange(n // per), per), cls), 1)
    tv_trainer = 0.5 * np.abs(th / per - want).sum(axis=1).mean()
    classes_trainer = (th > 0).sum(axis=1).mean()
    a, b = gh[:-1] - gh[:-1].mean(axis=1, keepdims=True), gh[1:] - gh[1:].mean(axis=1, keepdims=True)
    corr = ((a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))).mean()
    ps = parts[:n].reshape(n // per, per)
    nodes = np.array([len(np.unique(r)) for r in ps])
    req = np.concatenate([np.unique(r, return_counts=True)[1] for r in ps])
    return dict(nodes_med=float(np.median(nodes)), nodes_max=int(nodes.max()),
                per_req=float(np.median(req)), tv_global=tv_global, tv_trainer=tv_trainer,
                classes_trainer=classes_trainer, corr=corr)


def compare(n, c, g, t, k, n_classes, seed=0):
    """{'v1': stats, 'v2': stats, 'v3': stats, 'uniform': stats} for one configuration."""
    sizes = balanced(n, c)
    classes_of = np.arange(n) * n_classes // n  # ids sorted by class
    part_of = np.repeat(np.arange(c), sizes)
    out = {}
    for name, version in (("v1", 1), ("v2", 2), ("v3", 3)):
        ids, parts = epoch_order(sizes, g, version, k, g // t, seed)
        assert np.array_equal(np.sort(ids), np.arange(n))  # every sample once
        out[name] = stats(ids, parts, classes_of, n_classes, g, t)
    ids = np.random.default_rng(seed).permutation(n)
    out["uniform"] = stats(ids, part_of[ids], classes_of, n_classes, g, t)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1281167)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--configs", default="8:1024:8,64:4096:32,256:8192:64,1024:32768:256",
                    help="C:G:T,...")
    a = ap.parse_args()
    print(f"{a.samples} samples, {a.classes} classes (ids sorted by class), v2 / v3 K = {a.k}, "
          "L = G/T\n")
    print("| C | G | T | plan | nodes/trainer batch (median, max) | samples/request (median) "
          "| TV global | TV trainer | classes/trainer batch | consec. corr. |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for cfg in a.configs.split(","):
        c, g, t = map(int, cfg.split(":"))
        t0 = time.process_time()
        res = compare(a.samples, c, g, t, a.k, a.classes)
        for name in ("v1", "v2", "v3", "uniform"):
            s = res[name]
            print(f"| {c:,} | {g:,} | {t} | {name} | {s['nodes_med']:g}, {s['nodes_max']} | "
                  f"{s['per_req']:g} | {s['tv_global']:.3f} | {s['tv_trainer']:.3f} | "
                  f"{s['classes_trainer']:.1f} | {s['corr']:+.3f} |", flush=True)
        print(f"<!-- {cfg}: {time.process_time() - t0:.1f} s CPU -->", flush=True)


if __name__ == "__main__":
    main()
