#!/usr/bin/python3
"""Trainer CPU spent on the fleet plan (nearprep.fleet_plan) per position.

    PYTHONPATH=client/python /usr/bin/python3 bench/python/fleet_plan_bench.py \
        [--partitions 256] [--per-partition 5000] [--global-batch 1024] [--trainers 8]

Trainer 0 of T computes (sample id, partition) for its slice of every global
batch, as FleetClient does: the first global batch (what a trainer pays
before its first request) and a whole epoch. Baseline in the same run: the
plan by its definition, scalar Philox draws, whole partition streams and a
walk over the round's partitions per position (what fleet_plan did before
the windowed, vectorised plan); `--no-reference-epoch` skips its (slow)
whole-epoch run. Figures are process CPU time. `--plan-version 2|3
[--slice-partitions K]` times nearprep-fleet-plan/2 or /3 (L = G / T) instead, with
no baseline (the definition above is v1's).
"""

import argparse
import time

from nearprep import fleet_plan as fp


class ReferencePlan:
    """The definition: whole streams (scalar draws) cached per partition,
    round orders cached, a linear walk over the round per position."""

    def __init__(self, plan):
        self.p = plan
        self.streams, self.rounds = {}, {}

    def at(self, x):
        p = self.p
        r = p._round_of(x)
        off = x - p._before(r)
        order = self.rounds.get(r)
        if order is None:
            c = len(p.sizes)
            order = list(range(c))
            for i in range(c - 1, 0, -1):
                j = fp.round_order_draw(p.params.seed, p.params.epoch, r, i) % (i + 1)
                order[i], order[j] = order[j], order[i]
            self.rounds[r] = order
        for q in order:
            if p.sizes[q] <= r:
                continue
            if off == 0:
                s = self.streams.get(q)
                if s is None:
                    s = self.streams[q] = fp.partition_stream(p.sizes[q], q, p.params)
                return p.start[q] + s[r], q
            off -= 1
        raise AssertionError("unreachable")


def run(make, batches, args):
    plan = make()
    t0 = time.process_time()
    n = 0
    out = []
    for g in batches:
        lo, hi = plan_slice(g, args)
        out.append(plan(lo, hi))
        n += hi - lo
    return (time.process_time() - t0) / n * 1e6, out


def plan_slice(g, args):
    per = args.global_batch // args.trainers
    lo = min(args.n, g * args.global_batch)
    return lo, min(args.n, lo + per)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=256)
    ap.add_argument("--per-partition", type=int, default=5000)
    ap.add_argument("--global-batch", type=int, default=1024)
    ap.add_argument("--trainers", type=int, default=8)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--no-reference-epoch", action="store_true")
    ap.add_argument("--plan-version", type=int, default=1)
    ap.add_argument("--slice-partitions", type=int, default=4)
    args = ap.parse_args()
    starts = [i * args.per_partition for i in range(args.partitions + 1)]
    args.n = starts[-1]
    fp.check_trainers(args.global_batch, args.trainers)
    v2 = (dict(version=args.plan_version, slice_partitions=args.slice_partitions,
               slice_samples=args.global_batch // args.trainers)
          if args.plan_version in (2, 3) else {})
    params = fp.PlanParams(seed=3, epoch=1, block_samples=args.block, window=args.window,
                           global_batch=args.global_batch, **v2)
    num_batches = fp.GlobalPlan(starts, params).num_batches

    def new():
        p = fp.GlobalPlan(starts, params)
        return p.range

    def ref():
        r = ReferencePlan(fp.GlobalPlan(starts, params))
        return lambda lo, hi: [r.at(x) for x in range(lo, hi)]

    print(f"plan: C={args.partitions} partitions x {args.per_partition} samples, "
          f"G={args.global_batch}, T={args.trainers} (trainer 0), B={args.block}, "
          f"W={args.window}, {params.algorithm}; CPU us per position of the trainer's slice")
    if v2:
        a, _ = run(new, [0], args)
        print(f"  first global batch:  windowed+vectorised {a:9.1f}")
        a, _ = run(new, range(num_batches), args)
        print(f"  whole epoch ({num_batches} batches): windowed+vectorised {a:6.1f}")
        return
    a, out_a = run(new, [0], args)
    b, out_b = run(ref, [0], args)
    assert out_a == out_b, "the plan differs from its definition"
    print(f"  first global batch:  windowed+vectorised {a:9.1f}   definition {b:9.1f}   "
          f"({b / a:.0f}x)")
    a, out_a = run(new, range(num_batches), args)
    if args.no_reference_epoch:
        print(f"  whole epoch ({num_batches} batches): windowed+vectorised {a:6.1f}")
        return
    b, out_b = run(ref, range(num_batches), args)
    assert out_a == out_b, "the plan differs from its definition"
    print(f"  whole epoch ({num_batches} batches): windowed+vectorised {a:6.1f}   "
          f"definition {b:6.1f}   ({b / a:.1f}x)")


if __name__ == "__main__":
    main()
