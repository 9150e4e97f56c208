#!/usr/bin/env python3
"""Fleet simulator (issue 31, item 3): the real global plan and the real
client request logic against simulated storage nodes, on a virtual clock.

    PYTHONPATH=client/python /usr/bin/python3 bench/fleet/simulate.py
        [--nodes 1024] [--trainers 4096] [--local-batch 128] [--sampled 64]
        [--samples-per-partition 4096] [--batches 8] [--scenario all] ...

What is real and what is modelled:
- The plan: nearprep.fleet_global_plan.GlobalPlan (v1 and v2, K = 4,
  L = G / T), the same code the Python FleetClient runs, computed for every
  position the sampled trainers read and for the slices of --bg-sample
  (256) more trainers per global batch, which stand for the others.
- A sampled trainer (--sampled of the T, evenly spaced ranks) builds its
  node requests with the FleetClient's own pure functions
  (nearprep.fleet.slice_items, group_by_node with choose() over the live
  holders it knows, missing_by_part for fail-over and hedges, split_hedge
  to split a hedge over all the other live replicas, hedge_after for the
  hedge deadline over the last HEDGE_WINDOW latencies of the request's size
  class (hedge_class) pooled over all its nodes; --per-node adds rows with
  the old rule, one window per node),
  and fills each position with the first answer (later ones are dropped and
  counted), as FleetClient._finish_batch does.
- Nodes: `--cores` servers each, FIFO; a request of n samples costs
  (per_request + n * per_sample) * slow factor * lognormal(0, --service-sigma)
  CPU seconds (defaults: measured with the real daemon, see
  bench/fleet/measure_service.py); one-way network latency lognormal with
  median --net-ms. A killed node drops its queue and running requests (the
  trainer sees the reset one network latency later) and refuses new ones
  until it restarts, empty, --restart-s later (0: never). Positions whose
  replicas are all dead wait, as the client does (on_wait): asked again
  every --probe-s (the clients' probe_interval), once a restarted node has
  been back that long; column "waited" counts them, "missed" those never
  delivered (only with --restart-s 0).
- The other T - sampled trainers are background load: the --bg-sample
  trainers' requests (from the plan: one request per node per trainer
  batch, the samples it carries), scaled to T - sampled, become node work, cut into --bg-chunks jobs per
  node and global batch arriving with the same network latency; when a
  node dies their unfinished work moves to the partition's next live
  replica. With hedging on they hedge roughly (Sim.hedge_background): at
  the hedge deadline after its arrival (hedge_after over the sampled
  trainers' latencies of a mean background request's size class, pooled)
  a background job still queued is sent again whole, one running on a slow
  node what it has not done yet, split equally over the other live
  replicas of its partitions, and the original cancelled. Column "bg
  hedged %": the share of background work sent again (hedge load).
  Under plan v2 a slice touches at most K partitions, so the node load
  columns measure the fleet only with --bg-sample = --trainers (every
  trainer's slices computed; the default 256 makes them the sample's
  noise: docs/benchmarks.md, "Load balance").
- Open loop: global batch g is issued by every trainer at g * step; step is
  set so that the per-sample work alone keeps the nodes --load busy
  (per-request work comes on top: v1 pays more of it).
- Placement (--placement): "rendezvous" (default), each partition on the
  --replicas nodes with the highest rendezvous score (as `nearprep
  placement`), or "bounded" (as `nearprep placement --max-load F`, F =
  --max-load): partitions in order, each on the R nodes with the highest
  score among those holding fewer than ceil(F * C * R / n). The placement
  scores are drawn at random (numpy, --seed), not sha256 (C x n = 16.8 M
  hashes in Python at the default shape): the same distribution.
- Routing (--routing, the clients' replica_routing): "first" serves a
  partition from its live holder with the highest rendezvous score (the
  real sha256 score), "spread" from the holder at index (g + partition) mod
  the live holders' count in global batch g: both through the clients'
  choose(), for the sampled and the background trainers.

Columns: nodes/trainer batch (mean, max; the --bg-sample trainers),
samples/request (mean), requests/s per node (mean), node load max/mean (CPU
work served per node, nominal speed, over the simulated batches), batch
load max/mean (the same per global batch, by the batch the work belongs
to, averaged over the batches), batch
latency p50/p99 and their ratio (sampled trainers, ms, hedging off or on at
each --hedge percentile), warm p99/p50 (the same over batches >= --warmup:
the steady state once the trainers' hedge windows have filled), hedge req % (the sampled trainers' hedge requests
over their other requests: a hedge split over 2 replicas is 2), hedge smp %
(the samples those hedges asked for over the samples of the other
requests: the extra work), bg hedged % (above), slow util (the slowest
node's CPU time over its cores' time in the simulated batches),
delivered exactly once (every position of every sampled trainer batch
filled once; misses; duplicates dropped), plan CPU per position (Python
plan.range over the --bg-sample trainers' slices).
"""

import argparse
import collections
import heapq
import math
import os
import random
import sys
import time

import numpy as np

from nearprep import fleet_global_plan as fgp
from nearprep.fleet import (HEDGE_WINDOW, choose, group_by_node, hedge_after, hedge_class,
                            missing_by_part, rendezvous_score, slice_items, split_hedge)

# Measured on this machine with the real daemon (bench/fleet/measure_service.py,
# docs/benchmarks.md "Fleet simulator"): server CPU of one explicit-id request.
PER_REQUEST_S = 627e-6
PER_SAMPLE_S = 1.525e-3


def node_name(i):
    return f"node{i:04d}"


class Job:
    __slots__ = ("node", "work", "req", "part", "killed", "batch", "moved", "hedge", "t_start")

    def __init__(self, node, work, req=None, part=None, batch=0, hedge=False):
        self.node, self.work, self.req, self.part, self.batch = node, work, req, part, batch
        self.killed = False
        self.moved = False  # background work hedged away while queued
        self.hedge = hedge  # background hedge work (not hedged again)
        self.t_start = None  # when a core started it


class Req:
    """A sampled trainer's node request (FleetClient's _Req, simulated)."""
    __slots__ = ("trainer", "st", "target", "items", "hedge_of", "hedged", "cancelled",
                 "started", "finished", "done", "failed")

    def __init__(self, trainer, st, target, items, hedge_of=None):
        self.trainer, self.st, self.target, self.items = trainer, st, target, items
        self.hedge_of, self.hedged, self.cancelled = hedge_of, False, False
        self.started = self.finished = None
        self.done = self.failed = False


class Node:
    __slots__ = ("name", "cores", "free", "queue", "slow", "dead", "running", "work",
                 "work_by_batch", "busy", "back_at")

    def __init__(self, name, cores, slow):
        self.name, self.cores, self.free, self.slow = name, cores, cores, slow
        self.queue = collections.deque()
        self.running = set()
        self.dead = False
        self.work = 0.0  # nominal CPU seconds served
        self.work_by_batch = collections.Counter()  # global batch -> its share of work
        self.busy = 0.0  # CPU seconds it took (work * slow factor)
        self.back_at = None  # when it restarted after a kill


class Sim:
    def __init__(self, a, plan, holders, trainers_at, hedge, slow, kills, step, rng_seed):
        self.a, self.plan = a, plan
        self.holders = holders  # partition -> [node names], best score first
        self.trainers_at = trainers_at  # batch -> T
        # hedge: None, or (percentile, window): window "class" is
        # FleetClient's (one latency window per request size class,
        # hedge_class, over all the trainer's nodes); "node" the old rule,
        # one per node (a variant row).
        self.hedge, self.window_kind = (hedge if hedge is not None else (None, "class"))
        # The background trainers' hedge deadline: the sampled trainers'
        # request latencies by size class, pooled over all of them.
        self.bg_lat = collections.defaultdict(lambda: collections.deque(maxlen=HEDGE_WINDOW))
        self.bg_class = 0  # set by scenario(): the class of a mean background request
        self.spread = a.routing == "spread"
        self.kills = kills  # [(time, [node index])]
        self.step = step
        self.rng = random.Random(rng_seed)
        self.nodes = {node_name(i): Node(node_name(i), a.cores, slow.get(i, 1.0))
                      for i in range(a.nodes)}
        self.heap, self.seq = [], 0
        self.now = 0.0
        self.net_mu = math.log(a.net_ms / 1000.0)
        self.stats = collections.Counter()
        self.latencies = []  # sampled trainers' batch latencies (s)
        self.latency_batch = []  # the global batch of each
        self.plan_cpu = 0.0
        self.plan_positions = 0
        self.dead_global = set()
        self.ever_killed = set()
        # Background work whose partition had no live replica: (partition,
        # work, batch), sent again when a holder restarts.
        self.bg_waiting = []

    # -- helpers ------------------------------------------------------------
    def at(self, t, fn, *args):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, args))

    def net(self):
        return self.rng.lognormvariate(self.net_mu, self.a.net_sigma)

    def service(self, n, node):
        w = self.a.per_request + n * self.a.per_sample
        return w, w * node.slow * self.rng.lognormvariate(0.0, self.a.service_sigma)

    # -- nodes --------------------------------------------------------------
    def arrive(self, job):
        node = self.nodes[job.node]
        if node.dead:
            if job.req is not None:
                self.at(self.now + self.net(), self.reply, job.req, False)
            else:
                self.move_background(job)
            return
        node.queue.append(job)
        if job.req is None and not job.hedge and self.hedge is not None:
            # The background trainers hedge too (roughly): their work still
            # queued here after the hedge deadline (the sampled trainers'
            # pooled latencies of a mean background request's class) moves
            # to the partitions' other live replicas, split among them.
            after = hedge_after(self.bg_lat[self.bg_class], self.hedge, self.a.hedge_min,
                                self.a.hedge_samples)
            if after is not None:
                self.at(self.now + after, self.hedge_background, job)
        self.start(node)

    def hedge_background(self, job):
        """Background work (a chunk of many trainers' requests) at its hedge
        deadline: still queued, all of it is sent again; running on a slow
        node (its requests take slow x their time: past the deadline), what
        it has not done yet is; running on a node of normal speed, nothing
        (its requests end about in time). What is sent again is split over
        the other live replicas of its partitions (equal parts, as
        split_hedge), and the original cancelled at once (the real cancel
        comes when the hedge wins, a little later: the slow node's time is
        slightly under-counted)."""
        node = self.nodes[job.node]
        if job.killed or job.moved or job.node in self.dead_global:
            return
        if job in node.running:
            if node.slow <= 1.0:
                return
            node.running.discard(job)
            node.free += 1
            spent = self.now - job.t_start
            node.busy += spent
            node.work += spent / node.slow
            node.work_by_batch[job.batch] += spent / node.slow
            job.killed = True  # its finish event is dropped
            job.work -= spent / node.slow  # what is left to do
            self.at(self.now, self.start, node)
        elif job not in node.queue:
            return
        job.moved = True
        self.stats["bg_hedged_work"] += job.work
        for part, share in job.part.items():
            others = [h for h in self.holders[part]
                      if h != job.node and h not in self.dead_global]
            if not others:
                self.stats["bg_hedge_orphaned"] += 1
                continue
            for h in others:
                self.stats["bg_hedge_jobs"] += 1
                self.at(self.now + self.net(), self.arrive,
                        Job(h, job.work * share / len(others), part={part: 1.0},
                            batch=job.batch, hedge=True))

    def start(self, node):
        while node.free and node.queue:
            job = node.queue.popleft()
            if job.req is not None and job.req.cancelled:
                continue  # a hedge race's loser, still queued: cancelled
            if job.moved:
                continue  # background work hedged away
            node.free -= 1
            node.running.add(job)
            if job.req is not None:
                nominal, took = self.service(len(job.req.items), node)
            else:
                nominal, took = job.work, job.work * node.slow
            job.work = nominal
            job.t_start = self.now
            self.at(self.now + took, self.finish, job)

    def finish(self, job):
        if job.killed:
            return
        node = self.nodes[job.node]
        node.running.discard(job)
        node.free += 1
        node.work += job.work
        node.work_by_batch[job.batch] += job.work
        node.busy += job.work * node.slow
        if job.req is not None:
            self.at(self.now + self.net(), self.reply, job.req, True)
        self.start(node)

    def kill(self, idx):
        for i in idx:
            node = self.nodes[node_name(i)]
            node.dead = True
            self.dead_global.add(node.name)
            self.ever_killed.add(node.name)
            lost = list(node.running) + list(node.queue)
            node.running.clear()
            node.queue.clear()
            node.free = node.cores
            if self.a.restart_s > 0:
                self.at(self.now + self.a.restart_s, self.restart, node.name)
            for job in lost:
                job.killed = True
                if job.req is not None:
                    self.at(self.now + self.net(), self.reply, job.req, False)
                else:
                    self.move_background(job)

    def restart(self, name):
        """A killed node back (its pod or unit restarted), empty: the
        trainers' probes find it live again (Sim.refresh_dead), and the
        background work that waited for its partitions is sent to it."""
        node = self.nodes[name]
        node.dead = False
        node.back_at = self.now
        self.dead_global.discard(name)
        self.stats["restarts"] += 1
        still = []
        for part, work, batch in self.bg_waiting:
            if name in self.holders[part]:
                self.at(self.now + self.net(), self.arrive,
                        Job(name, work, part={part: 1.0}, batch=batch))
            else:
                still.append((part, work, batch))
        self.bg_waiting = still

    def refresh_dead(self, tr):
        """The client's probe loop: a node it marked dead that has been
        back for a probe interval is live again for it."""
        probe = self.a.probe_s
        tr["dead"] = {n for n in tr["dead"] if self.nodes[n].dead or
                      self.nodes[n].back_at is None or self.now < self.nodes[n].back_at + probe}

    def retry_orphans(self, tr, st, items_by_part):
        """Positions that had no live replica: the client waits (on_wait)
        and asks again after a probe interval."""
        if st["done"]:
            return
        self.refresh_dead(tr)
        filled = st["filled"]
        covered = {pos for o in st["pending"] for pos, _ in o.items}
        left = {}
        for part, items in items_by_part.items():
            keep = [(pos, sid) for pos, sid in items if pos not in filled and pos not in covered]
            if keep:
                left[part] = keep
        if left:
            self.submit(tr, st, left, retry=True)

    def move_background(self, job):
        """Background trainers re-send a dead node's work to each
        partition's next live replica (after a network round trip).
        job.part: {partition: share of job.work}."""
        for part, share in job.part.items():
            live = [h for h in self.holders[part] if h not in self.dead_global]
            if not live:
                self.stats["background_orphaned"] += 1
                self.bg_waiting.append((part, job.work * share, job.batch))
                continue
            to = choose(part, live, job.batch if self.spread else None)
            self.at(self.now + 2 * self.net(), self.arrive,
                    Job(to, job.work * share, part={part: 1.0}, batch=job.batch))

    # -- sampled trainers (FleetClient's logic) -------------------------------
    def assign_for(self, tr, g):
        dead = tr["dead"]
        key = g if self.spread else None

        def assign(partition, exclude=None):
            live = [h for h in self.holders[partition] if h not in dead and h != exclude]
            return choose(partition, live, key)
        return assign

    def issue(self, tr, g):
        t0 = time.process_time()
        want, parts = slice_items(self.plan, g, tr["rank_at"][g], self.trainers_at[g])
        self.plan_cpu += time.process_time() - t0
        self.plan_positions += len(want)
        self.refresh_dead(tr)
        st = {"g": g, "want": want, "filled": {}, "pending": set(), "t0": self.now,
              "tr": tr, "done": False}
        tr["batches"].append(st)
        self.submit(tr, st, parts)
        if not want:
            self.batch_done(st)

    def window(self, tr, r):
        """The latency window r is judged by (and recorded in)."""
        return tr["lat"][hedge_class(len(r.items)) if self.window_kind == "class" else r.target]

    def submit(self, tr, st, items_by_part, hedge_of=None, retry=False):
        if hedge_of is None:
            by_node, orphans = group_by_node(items_by_part, self.assign_for(tr, st["g"]))
        else:
            # A hedge: split over all the other live replicas (split_hedge,
            # as FleetClient._hedge).
            dead = tr["dead"]
            by_node, orphans = split_hedge(
                items_by_part, lambda p: [h for h in self.holders[p] if h not in dead],
                hedge_of.target)
        if orphans and hedge_of is None:
            # No live replica known: the real client waits (on_wait) and
            # re-probes; asked again after each probe interval (a killed
            # node restarts after --restart-s; never with 0: then missed).
            if not retry:
                self.stats["orphan_partitions"] += len(orphans)
                self.stats["waited_positions"] += sum(len(items_by_part[p]) for p in orphans)
            if self.a.restart_s > 0:
                self.at(self.now + self.a.probe_s, self.retry_orphans, tr, st,
                        {p: items_by_part[p] for p in orphans})
        for t, items in by_node.items():
            r = Req(tr, st, t, items, hedge_of)
            r.started = self.now
            st["pending"].add(r)
            self.stats["requests"] += 1
            if hedge_of is not None:
                self.stats["hedges"] += 1
                self.stats["hedge_samples"] += len(items)
            else:
                self.stats["request_samples"] += len(items)
            self.at(self.now + self.net(), self.arrive, Job(t, 0.0, req=r, batch=st["g"]))
            if self.hedge is not None and hedge_of is None:
                after = hedge_after(self.window(tr, r), self.hedge, self.a.hedge_min,
                                    self.a.hedge_samples)
                if after is not None:
                    self.at(self.now + after, self.maybe_hedge, r)
        return by_node

    def maybe_hedge(self, r):
        st = r.st
        if r.done or r.hedged or st["done"]:
            return
        r.hedged = True
        filled = st["filled"]
        missing = missing_by_part(r.items, lambda pos: pos in filled, lambda sid: False,
                                  st["want"])
        if missing:
            self.submit(r.trainer, st, missing, hedge_of=r)

    def reply(self, r, ok):
        if r.done:
            return
        r.done, r.finished = True, self.now
        st, tr = r.st, r.trainer
        st["pending"].discard(r)
        if r.cancelled:
            return
        filled = st["filled"]
        if ok:
            self.window(tr, r).append(self.now - r.started)
            self.bg_lat[hedge_class(len(r.items))].append(self.now - r.started)
            kept = 0
            for pos, _ in r.items:
                if pos in filled:
                    self.stats["duplicates_dropped"] += 1
                    continue
                filled[pos] = r.target
                kept += 1
            if r.hedge_of is not None:
                self.stats["hedge_wins"] += kept
            # Hedge races decided: requests whose positions are all filled
            # are cancelled (FleetClient._cancel).
            for o in list(st["pending"]):
                if (o.hedged or o.hedge_of is not None) and all(p in filled for p, _ in o.items):
                    o.cancelled = True
                    st["pending"].discard(o)
                    self.stats["cancelled"] += 1
                    # Its time so far counts as its latency (a lower bound),
                    # as FleetClient._cancel records it.
                    self.window(tr, o).append(self.now - o.started)
        else:
            tr["dead"].add(r.target)
            self.stats["failovers"] += 1
            covered = {pos for o in st["pending"] for pos, _ in o.items}
            missing = missing_by_part(r.items, lambda pos: pos in filled or pos in covered,
                                      lambda sid: False, st["want"])
            if missing:
                self.submit(tr, st, missing)
        if not st["done"] and len(filled) == len(st["want"]):
            self.batch_done(st)

    def batch_done(self, st):
        st["done"] = True
        self.latencies.append(self.now - st["t0"])
        self.latency_batch.append(st["g"])
        for o in st["pending"]:
            o.cancelled = True

    # -- run ------------------------------------------------------------------
    def run(self, sampled, background):
        """sampled: [{"rank_at": {g: rank}}]; background: {g: {node: (work, {part: work})}}."""
        a = self.a
        for tr in sampled:
            tr.update(dead=set(), batches=[],
                      lat=collections.defaultdict(lambda: collections.deque(maxlen=HEDGE_WINDOW)))
            for g in range(a.batches):
                self.at(g * self.step, self.issue, tr, g)
        for g, per_node in background.items():
            for name, parts in per_node.items():
                total = sum(parts.values())
                share = {part: w / total for part, w in parts.items()}
                for _ in range(a.bg_chunks):
                    self.at(g * self.step + self.net(), self.arrive,
                            Job(name, total / a.bg_chunks, part=share, batch=g))
        for t, idx in self.kills:
            self.at(t, self.kill, idx)
        while self.heap:
            self.now, _, fn, args = heapq.heappop(self.heap)
            fn(*args)
        # Exactly once: every position of every sampled trainer batch filled
        # once (filled is a dict: a second fill would have been dropped and
        # counted), none missing.
        missed = dup = 0
        for tr in sampled:
            for st in tr["batches"]:
                missed += len(st["want"]) - len(st["filled"])
                if set(st["filled"]) - set(st["want"]):
                    dup += 1
        self.stats["missed"] = missed
        self.stats["foreign"] = dup
        return self


def bounded_placement(scores, replicas, max_load):
    """`nearprep placement --max-load` (server/fleet/placement.h) over a
    score matrix [partition][node] (higher first; ties do not occur with
    random floats): partitions in order, each on the `replicas` nodes with
    the highest score among those holding fewer than cap = ceil(max_load *
    C * R / n) so far, topped up past the cap when fewer have room. Returns
    [[node index]] per partition and cap."""
    c, n = scores.shape
    cap = math.ceil(max_load * c * replicas / n)
    load = np.zeros(n, dtype=np.int64)
    out = []
    for p in range(c):
        order = np.argsort(-scores[p], kind="stable")
        picked = order[load[order] < cap][:replicas].tolist()
        if len(picked) < replicas:
            picked += [int(i) for i in order if int(i) not in picked][:replicas - len(picked)]
        load[picked] += 1
        out.append(picked)
    return out, cap


def build_holders(a):
    """partition -> its --replicas holders, highest rendezvous score first,
    and the partitions per node max/mean. --placement rendezvous: each
    partition on R distinct nodes drawn at random (top-R rendezvous over
    1,024 nodes, as `nearprep placement` does it, is the same distribution
    but 1,024 sha256 per partition); bounded: bounded_placement() over a
    random score matrix. Holders are ordered by the clients'
    rendezvous_score (choose() sorts by it again)."""
    rng = np.random.default_rng(a.seed)
    c = a.nodes * a.partitions_per_node
    if a.placement == "bounded":
        picked_all, _ = bounded_placement(rng.random((c, a.nodes)), a.replicas, a.max_load)
    else:
        picked_all = [rng.choice(a.nodes, a.replicas, replace=False) for _ in range(c)]
    holders = []
    held = np.zeros(a.nodes, dtype=np.int64)
    for p, idx in enumerate(picked_all):
        held[np.asarray(idx, dtype=np.int64)] += 1
        picked = [node_name(int(i)) for i in idx]
        holders.append(sorted(picked, key=lambda n: (rendezvous_score(n, p), n), reverse=True))
    return holders, held.max() / held.mean()


def make_plan(a, version, g_total, t_slice):
    c = a.nodes * a.partitions_per_node
    starts = [i * a.samples_per_partition for i in range(c + 1)]
    kw = (dict(version=version, slice_partitions=a.k, slice_samples=t_slice)
          if version in (2, 3) else {})
    params = fgp.PlanParams(seed=a.seed, epoch=0, block_samples=a.block, window=a.window,
                            global_batch=g_total, **kw)
    return fgp.GlobalPlan(starts, params)


def node_index(holders, dead, c, spread_key=None):
    """partition -> index of the node serving it (dead: node names;
    spread_key: the global batch under --routing spread, else None)."""
    out = np.empty(c, dtype=np.int64)
    for p in range(c):
        live = [h for h in holders[p] if h not in dead]
        out[p] = int(choose(p, live, spread_key)[4:]) if live else -1
    return out


_BACKGROUND = {}


def background(a, plan, holders, g_total, trainers_at, kill_time, dead_names, step, c):
    """Plan-level figures (--bg-sample trainers' slices of each batch, the
    plan computed for them) and the background work they stand for (scaled
    to the T - sampled trainers not simulated in detail)."""
    nodes_per = []
    spr_req = spr_samples = 0
    bg = {}
    sampled_ranks = {}
    plan_cpu = plan_pos = 0
    seen = set()
    for g in range(a.batches):
        t = trainers_at[g]
        if g * g_total >= len(plan):
            break
        per = g_total // t
        # Batches issued after the kill see the dead nodes (the background
        # trainers' view; sampled trainers discover them by failing).
        dead = dead_names if (kill_time is not None and g * step >= kill_time) else set()
        owner = node_index(holders, dead, c, g if a.routing == "spread" else None)
        b = min(a.bg_sample, t)
        ranks_bg = sorted({(i * t) // b + (t // b) // 2 for i in range(b)})
        t0 = time.process_time()
        slices = [plan.range(*plan.slice(g, r, t)) for r in ranks_bg]
        plan_cpu += time.process_time() - t0
        lens = [len(x) for x in slices]
        plan_pos += sum(lens)
        flat = np.array([pt for x in slices for pt in x], dtype=np.int64).reshape(-1, 2)
        sids = flat[:, 0].tolist()
        assert len(set(sids)) == len(sids) and not seen.intersection(sids), \
            "plan: a sample twice in the slices computed"
        seen.update(sids)
        p = flat[:, 1]
        rows = np.repeat(np.arange(len(slices)), lens)
        nd = owner[p]
        live = nd >= 0  # a partition whose replicas are all dead: nobody serves it
        p, rows, nd = p[live], rows[live], nd[live]
        key = np.unique(rows * a.nodes + nd)
        nodes_per.append(np.bincount(key // a.nodes, minlength=len(slices)))
        # Scaled to all T trainers of the batch (requests/s per node).
        spr_req += len(key) * t / len(slices)
        spr_samples += len(p) * t / len(slices)
        sampled_ranks[g] = sorted({(i * t) // a.sampled for i in range(a.sampled)})
        scale = (t - len(sampled_ranks[g])) / len(slices)
        nreq = np.bincount(key % a.nodes, minlength=a.nodes) * scale
        # work per (node, partition) of the background trainers
        pk = np.unique(nd * c + p, return_counts=True)
        work = collections.defaultdict(dict)
        for (k, cnt) in zip(*pk):
            ni, part = int(k // c), int(k % c)
            work[node_name(ni)][part] = cnt * scale * a.per_sample
        for ni in np.nonzero(nreq)[0]:
            d = work[node_name(int(ni))]
            share = nreq[ni] * a.per_request / len(d)
            for part in d:
                d[part] += share
        bg[g] = work
    return nodes_per, spr_req, spr_samples, bg, sampled_ranks, plan_cpu / max(plan_pos, 1)


def scenario(a, name, version, plan, holders, g_total, trainers_at,
             slow, kill_at, kill_idx, hedge):
    c = a.nodes * a.partitions_per_node
    per_node_work = a.per_sample * g_total / (a.nodes * a.cores)
    step = per_node_work / a.load
    kill_time = kill_at * step if kill_idx else None
    dead_names = {node_name(i) for i in kill_idx}
    key = (id(plan), name, tuple(kill_idx), tuple(sorted(trainers_at.items())))
    if key not in _BACKGROUND:
        _BACKGROUND.clear()
        _BACKGROUND[key] = background(a, plan, holders, g_total, trainers_at, kill_time,
                                      dead_names, step, c)
    nodes_per, spr_req, spr_samples, bg, sampled_ranks, plan_cpu = _BACKGROUND[key]
    nb = len(bg)
    sampled = [{"rank_at": {g: sampled_ranks[g][i] for g in range(nb)}}
               for i in range(min(len(sampled_ranks[g]) for g in range(nb)))]
    a_local = argparse.Namespace(**vars(a))
    a_local.batches = nb
    sim = Sim(a_local, plan, holders, trainers_at, hedge, slow,
              [(kill_time, kill_idx)] if kill_idx else [], step, a.seed + version)
    sim.bg_class = hedge_class(round(spr_samples / spr_req))
    bg_work = sum(w for per_node in bg.values() for parts in per_node.values()
                  for w in parts.values())
    t0 = time.process_time()
    sim.run(sampled, bg)
    sim_cpu = time.process_time() - t0
    npb = np.concatenate(nodes_per)
    alive = [n for n in sim.nodes.values() if n.name not in sim.ever_killed]
    work = np.array([n.work for n in alive] or [0.0])
    per_batch = []
    for g in range(nb):
        wg = np.array([n.work_by_batch.get(g, 0.0) for n in alive] or [0.0])
        if wg.mean() > 0:
            per_batch.append(wg.max() / wg.mean())
    # Node load over nodes never killed (the killed ones served less).
    lat = np.array(sim.latencies) * 1000
    s = sim.stats
    # The slow nodes' utilisation: CPU time taken over the cores' time in
    # the simulated batches (above 1: its queue grows without bound).
    slow_util = [sim.nodes[node_name(i)].busy / (a.cores * nb * step) for i in slow]
    # (no batch complete: every sampled batch missed positions)
    p50, p99 = (np.percentile(lat, 50), np.percentile(lat, 99)) if len(lat) else (np.nan, np.nan)
    # Steady state: the batches from --warmup on (a trainer hedges once its
    # size class has hedge_samples latencies: about 3 batches of 4 requests
    # with the clients' default 10; a real run has thousands of batches).
    warm = lat[np.array(sim.latency_batch, dtype=np.int64) >= a.warmup] if len(lat) else lat
    w50, w99 = ((np.percentile(warm, 50), np.percentile(warm, 99)) if len(warm)
                else (np.nan, np.nan))
    return {
        "scenario": name, "v": version,
        "hedge": "off" if hedge is None else f"p{hedge[0] * 100:g} {hedge[1]}",
        "placement": (a.placement if a.placement == "rendezvous"
                      else f"bounded {a.max_load:g}"),
        "routing": a.routing,
        "nodes/batch": f"{npb.mean():.1f} / {npb.max()}",
        "samples/req": f"{spr_samples / spr_req:.1f}",
        "req/s/node": f"{spr_req / nb / a.nodes / step:.0f}",
        "load max/mean": f"{work.max() / work.mean():.2f}",
        "batch load max/mean": f"{np.mean(per_batch):.2f}" if per_batch else "-",
        "p50 ms": f"{p50:.1f}", "p99 ms": f"{p99:.1f}", "p99/p50": f"{p99 / p50:.2f}",
        "warm p99/p50": f"{w99 / w50:.2f}",
        "exactly once": ("yes" if s["missed"] == 0 and s["foreign"] == 0
                         and len(lat) == len(sampled) * nb else "NO"),
        "missed": s["missed"], "waited": s["waited_positions"],
        "dups dropped": s["duplicates_dropped"],
        "hedges": s["hedges"],
        # Extra requests hedging costs the sampled trainers (hedge requests
        # over the others), and the share of background work hedged away.
        "hedge req %": f"{100 * s['hedges'] / max(1, s['requests'] - s['hedges']):.1f}",
        "hedge smp %": f"{100 * s['hedge_samples'] / max(1, s['request_samples']):.1f}",
        "bg hedged %": f"{100 * s['bg_hedged_work'] / max(bg_work, 1e-12):.1f}",
        "slow util": f"{max(slow_util):.2f}" if slow_util else "-",
        "failovers": s["failovers"],
        "plan us/pos": f"{1e6 * plan_cpu:.2f}",
        "_sim_cpu": sim_cpu, "_step": step,
    }


COLUMNS = ["scenario", "v", "hedge", "placement", "routing", "nodes/batch", "samples/req",
           "req/s/node", "load max/mean", "batch load max/mean", "p50 ms", "p99 ms", "p99/p50",
           "warm p99/p50",
           "exactly once", "missed", "waited", "dups dropped", "hedges", "hedge req %", "hedge smp %",
           "bg hedged %", "slow util", "failovers", "plan us/pos"]


def print_table(rows, out=None):
    out = out or sys.stdout
    out.write("| " + " | ".join(COLUMNS) + " |\n")
    out.write("|" + "|".join("---:" if c not in ("scenario", "hedge", "placement", "routing",
                                                 "exactly once") else "---"
                             for c in COLUMNS) + "|\n")
    for r in rows:
        out.write("| " + " | ".join(str(r[c]) for c in COLUMNS) + " |\n")
    out.flush()


SCENARIOS = ["base", "kill10", "slow1", "rack", "tchange"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--trainers", type=int, default=4096)
    ap.add_argument("--trainers-after", type=int, default=3072,
                    help="tchange: T after the change (mid-epoch)")
    ap.add_argument("--local-batch", type=int, default=128, help="G / T")
    ap.add_argument("--sampled", type=int, default=64, help="trainers simulated in detail")
    ap.add_argument("--partitions-per-node", type=int, default=16)
    ap.add_argument("--samples-per-partition", type=int, default=256)
    ap.add_argument("--batches", type=int, default=8, help="global batches simulated")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--k", type=int, default=4, help="plan v2's K")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cores", type=int, default=16, help="a node's parallel requests")
    ap.add_argument("--per-request", type=float, default=PER_REQUEST_S)
    ap.add_argument("--per-sample", type=float, default=PER_SAMPLE_S)
    ap.add_argument("--service-sigma", type=float, default=0.3)
    ap.add_argument("--net-ms", type=float, default=0.2)
    ap.add_argument("--net-sigma", type=float, default=0.5)
    ap.add_argument("--load", type=float, default=0.5,
                    help="nodes' CPU busy with per-sample work alone (sets the step)")
    ap.add_argument("--bg-chunks", type=int, default=8)
    ap.add_argument("--bg-sample", type=int, default=256,
                    help="trainers whose slices are computed to stand for the background")
    ap.add_argument("--hedge", default="0.95",
                    help="hedging percentile(s) when on, comma-separated: a row each")
    ap.add_argument("--hedge-min", type=float, default=0.0)
    ap.add_argument("--per-node", action="store_true",
                    help="also a row per percentile hedging on one latency window per node "
                         "(the clients' old rule; they now pool over nodes by size class)")
    ap.add_argument("--hedge-samples", type=int, default=1)
    ap.add_argument("--slow-fraction", type=float, default=0.01)
    ap.add_argument("--slow-factor", type=float, default=10.0)
    ap.add_argument("--kill-fraction", type=float, default=0.10)
    ap.add_argument("--rack", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=4,
                    help="column 'warm p99/p50': batches from this one on (hedging warmed up)")
    ap.add_argument("--restart-s", type=float, default=2.0,
                    help="a killed node restarts (empty) this many seconds later; 0: never "
                         "(positions of partitions whose replicas all died are then missed)")
    ap.add_argument("--probe-s", type=float, default=0.5,
                    help="the clients' probe_interval: a restarted node is live again for a "
                         "trainer this long after it is back; orphan positions asked again "
                         "this often")
    ap.add_argument("--scenario", default="all", help=",".join(SCENARIOS) + " or all")
    ap.add_argument("--placement", choices=["rendezvous", "bounded"], default="rendezvous",
                    help="rendezvous: top-R score; bounded: `nearprep placement --max-load`")
    ap.add_argument("--max-load", type=float, default=1.0,
                    help="bounded placement: a node holds at most ceil(F * C * R / n)")
    ap.add_argument("--routing", choices=["first", "spread"], default="first",
                    help="the clients' replica_routing (nearprep.fleet.choose)")
    ap.add_argument("--hedging", choices=["both", "off", "on"], default="both",
                    help="rows without hedging, with (per node), or both")
    ap.add_argument("--versions", default="1,2")
    a = ap.parse_args(argv)
    if a.max_load < 1.0:
        ap.error(f"--max-load: must be >= 1, got {a.max_load:g}")
    names = SCENARIOS if a.scenario == "all" else a.scenario.split(",")
    versions = [int(v) for v in a.versions.split(",")]
    wall0 = time.time()
    _BACKGROUND.clear()  # keyed by plan, not by placement or routing
    holders, held = build_holders(a)
    rng = random.Random(a.seed)
    mid = a.batches / 2.0 - 0.5  # killed halfway through the simulated batches
    print(f"# {a.nodes} nodes x {a.trainers} trainers, G/T = {a.local_batch}, "
          f"{a.partitions_per_node} partition(s)/node of {a.samples_per_partition} samples, "
          f"{a.replicas} replicas, {a.batches} global batches simulated, {a.sampled} trainers "
          f"sampled; node: {a.cores} cores, {a.per_request * 1e6:.0f} us/request + "
          f"{a.per_sample * 1e6:.0f} us/sample, load {a.load}; placement {a.placement}"
          + (f" --max-load {a.max_load:g}" if a.placement == "bounded" else "")
          + f" (partitions held max/mean {held:.2f}), routing {a.routing}", flush=True)
    all_rows = []
    plans = {}
    for name in names:
        t_before = a.trainers
        t_after = a.trainers_after if name == "tchange" else a.trainers
        if name == "tchange":
            # G must be divisible by both T: G = T_after * local batch.
            g_total = t_after * a.local_batch
            if g_total % t_before:
                raise SystemExit(f"tchange: G = {g_total} not divisible by T = {t_before}")
        else:
            g_total = a.trainers * a.local_batch
        trainers_at = {g: (t_before if g < a.batches // 2 else t_after) for g in range(a.batches)}
        slow = {}
        kill_idx = []
        if name == "slow1":
            for i in rng.sample(range(a.nodes), max(1, int(a.nodes * a.slow_fraction))):
                slow[i] = a.slow_factor
        if name == "kill10":
            kill_idx = sorted(rng.sample(range(a.nodes), int(a.nodes * a.kill_fraction)))
        if name == "rack":
            kill_idx = list(range(a.rack))
        rows = []
        for v in versions:
            key = (v, g_total, g_total // t_before)
            if key not in plans:
                plans[key] = make_plan(a, v, g_total, g_total // t_before)
            plan = plans[key]
            qs = [float(q) for q in a.hedge.split(",")]
            modes = (([None] if a.hedging != "on" else [])
                     + ([(q, "class") for q in qs] if a.hedging != "off" else [])
                     + ([(q, "node") for q in qs] if a.per_node else []))
            for hedge in modes:
                r = scenario(a, name, v, plan, holders, g_total, trainers_at, slow, mid,
                             kill_idx, hedge)
                rows.append(r)
                print(f"# {name} v{v} hedge {r['hedge']}: simulated in {r['_sim_cpu']:.1f} s CPU "
                      f"(step {r['_step'] * 1000:.1f} ms)", file=sys.stderr, flush=True)
        print(f"\n## {name}" + (f" (T {t_before} -> {t_after} at batch {a.batches // 2}, "
                                 f"G = {g_total})" if name == "tchange" else ""))
        print_table(rows)
        all_rows += rows
    print(f"\n# wall {time.time() - wall0:.0f} s", flush=True)
    return all_rows


if __name__ == "__main__":
    main()
