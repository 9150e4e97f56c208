"""Fleet client (issue 14): one trainer's batches of a partitioned dataset
served by several daemons, in the global plan's order, exactly once.

    from nearprep.fleet import FleetClient
    fc = FleetClient(["10.0.0.1:7070", "10.0.0.2:7070"], "imagenet",
                     manifest="imagenet.nearprep-manifest", seed=1,
                     global_batch=256, trainers=8, rank=3,
                     height=224, width=224, crop="random_resized")
    for batch in fc.epoch(0):            # FleetBatch objects, in order
        train(batch.images, batch.labels)
        ckpt = fc.checkpoint()           # resume with any T dividing G

How (docs/protocol.md, "Fleet datasets"):
- The plan (nearprep.fleet_plan) gives every global position's sample id and
  partition; this trainer takes positions [gG + kG/T, gG + (k+1)G/T) of each
  global batch g.
- Each partition is served by the live replica with the highest rendezvous
  score sha256(node/partition): every trainer computes the same assignment,
  no dispatcher. Each node gets one request per global batch with the ids it
  serves (StreamBatchesRequest.sample_ids), `prefetch` global batches ahead.
  replica_routing="spread" (opt-in) rotates each partition over its live
  holders instead: global batch g goes to the holder at index
  (g + partition) mod their count in (score, name) order (choose()), so
  every replica serves; the data is the same either way.
- A node that fails (UNAVAILABLE, DEADLINE_EXCEEDED: also a node that stops
  answering without a reset, FAILED_PRECONDITION: it no longer holds the
  partition; STATUS_ACTIONS, the table in docs/protocol.md, says which codes
  fail over, which are asked of the same node again and which raise) or
  answers malformed (a sample id not asked for or sent twice, labels or
  tensor rows not matching the ids: DATA_LOSS, the message dropped whole)
  is marked dead. What it delivered before failing is kept
  (stats["kept_partial"] counts those samples) and only the positions it
  still owed are requested from the next replica; results for positions
  already filled are dropped (late duplicates, counted in stats).
- Dead nodes, and nodes that failed their first probe (reported through
  on_event: "node HOST:PORT unreachable at start: ..."), are re-probed with
  ListDatasets every probe_interval, in the background: one loop per dead
  node on the client's probe threads, so a probe of a black-holed node
  waits out rpc_timeout there, never on the trainer's thread (nor on a
  batch that waits for a replica). A node that answers and holds the plan's
  manifest is live again (on_event: "node HOST:PORT is live again") and
  serves its partitions from the next request on; requests already sent
  stay where they are, so every position is still served once.
  With no live replica for a partition the client waits and reports through
  on_wait(message); it never skips or substitutes data.
- Hedged requests (hedge=, default 0.95; None or 0: off; docs/protocol.md):
  a node request not answered within the `hedge` latency percentile of its
  size class (hedge_class: floor(log2(samples))), over the last
  HEDGE_WINDOW requests of that class to any node (at least hedge_min s;
  once the class has hedge_samples), is also sent, for the positions it
  has not delivered, to all the other live replicas of their partitions,
  split among them (split_hedge); the first answer per position wins, a
  request of the race whose positions are all filled is cancelled and its
  late results dropped by position. stats["hedges"] (requests sent) and
  stats["hedge_wins"] (positions they filled); each hedge is reported
  through on_event ("hedge: node HOST:PORT ...").
- Verification (verify_fraction=, opt-in; docs/protocol.md "Per-sample
  digests", docs/python.md "Fleets"): positions whose verify_score(seed, epoch, position) is below
  verify_fraction are also fetched from a second live replica holding the
  partition (not the node that served them) and the two answers compared
  (label and tensor row: dtype, shape, bytes; or the error code). On a
  mismatch a third live replica, when there is one, decides: the node in
  the minority is marked dead (re-probed like any dead node) and the
  majority's answer goes into the batch; without a third (or when all three
  differ) it is unresolved and the first answer is kept. Each mismatch is
  reported through on_event ("verify: ..."); stats["verified"],
  stats["verify_mismatches"], stats["verify_unresolved"] count them. Honest
  replicas answer byte for byte alike, so verification never changes what
  the trainer gets from them.
- A sample that fails to decode is reported at its position in
  FleetBatch.errors (the batch then has one image fewer).
- Placement versions: each node reports the version of its placement
  document (DatasetInfo.placement_version, 0 without one);
  placement_versions() gives them, and on_event reports live nodes that
  disagree (a rollout in progress), agreeing again, and a node whose
  version changed between probes. Only informational: the assignment uses
  what nodes hold (partitions_held).

Receive path (`native=`, as nearprep.Client's; nearprep.transport): None
("auto", the default) receives with the native module (nearprep._native:
the C++ client copies each tensor once, with the GIL released, into pooled
buffers) when it is built and the channel is plaintext without custom
channel_options, $NEARPREP_NATIVE=0 / 1 overriding; True requires it; False
uses grpcio. Every request has the deadline rpc_timeout on either path, so
a node that stops answering ends its request with DEADLINE_EXCEEDED and is
failed over. Probes (ListDatasets) always go through grpcio. FleetBatch is
the same on both paths, byte for byte: `images` is a new array the client
owns (stacked from the received batches), never a view of a receive buffer.

Discovery: `targets` is a list of "host:port", or one "dns:NAME:PORT" that
resolves to every node (a Kubernetes headless Service: deploy/k8s), once.
Membership (nearprep.fleet_membership; targets=None): targets_dns=
"NAME:PORT" (resolved again every membership_interval s, default 30) or
targets_file=PATH (one host:port per line, # comments; read again every
membership_interval s, default 1); at each batch start the client takes the
latest set: nodes that left are removed as dead ones, nodes that appeared
are probed at once and used once live (docs/operations.md, "Fleet
membership").

Thread-safety: one FleetClient per trainer; iterate from one thread.
on_event may be called from the client's pool threads (a background probe,
a request asked again); on_wait is called on the iterating thread.
"""

import collections
import concurrent.futures as _futures
# Imported before this module registers its exit hook (below): threading
# runs exit hooks last-registered first, so close_all_fleet_clients cancels
# the requests in flight before concurrent.futures joins the pool threads.
import concurrent.futures.thread  # noqa: F401
import functools
import hashlib
import math
import os
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import grpc
import numpy as np

from nearprep import fleet_membership as _fm
from nearprep import fleet_plan as fp
from nearprep import transport as _transport
from nearprep.client import CREDENTIAL_ARGS, Client, _at_exit
from nearprep.errors import NearprepError, from_rpc_error
from nearprep import _stubs
from nearprep.request import build_request, max_batch_message_bytes

# FleetClients not yet closed, closed at interpreter exit.
_live_clients = weakref.WeakSet()


def _close_all_fleet_clients():
    for fc in list(_live_clients):
        if fc._pid != os.getpid():
            continue  # inherited by a forked child: the parent's to close
        try:
            fc.close()
        except Exception:  # noqa: BLE001 - exiting: close the others
            pass


_at_exit(_close_all_fleet_clients)

# What the client does when a node's request ends with a status code: the
# table in docs/protocol.md ("Status codes: retry, fail over or raise"),
# which the C++ FleetClient (FleetStatusAction) follows too; tests check
# both against the document. "retry": ask the same node again for what it
# still owes (at most SAME_NODE_RETRIES times, then fail over); "fail over":
# mark the node dead and ask the next replica; "raise": the error reaches
# the caller (every replica would answer the same). A code not listed raises.
STATUS_ACTIONS = {
    "CANCELLED": "fail over",
    "UNKNOWN": "fail over",
    "INVALID_ARGUMENT": "raise",
    "DEADLINE_EXCEEDED": "fail over",
    "NOT_FOUND": "fail over",
    "ALREADY_EXISTS": "raise",
    "PERMISSION_DENIED": "raise",
    "RESOURCE_EXHAUSTED": "fail over",
    "FAILED_PRECONDITION": "fail over",
    "ABORTED": "retry",
    "OUT_OF_RANGE": "raise",
    "UNIMPLEMENTED": "raise",
    "INTERNAL": "fail over",
    "UNAVAILABLE": "fail over",
    "DATA_LOSS": "fail over",
    "UNAUTHENTICATED": "raise",
}
SAME_NODE_RETRIES = 2

# Hedged requests (FleetClient(hedge=...)): on by default at this latency
# percentile (docs/protocol.md "Hedged requests"; None or 0: off).
HEDGE_DEFAULT = 0.95
# The latencies kept per request
# size class (hedge_class), pooled over all nodes: the last HEDGE_WINDOW
# node requests of the class, for its latency percentile.
HEDGE_WINDOW = 64
# Probe threads a FleetClient with a membership may start (one per dead node
# being probed; the pool starts them as needed).
MEMBERSHIP_POOL = 256


def status_action(code_name) -> str:
    """"retry", "fail over" or "raise" for a status code name (STATUS_ACTIONS)."""
    return STATUS_ACTIONS.get(code_name, "raise")


def _code_name(err):
    """The status code name of a grpc.RpcError or NearprepError."""
    if isinstance(err, grpc.RpcError):
        try:
            return err.code().name
        except Exception:  # noqa: BLE001 - not a call object
            return "UNKNOWN"
    return getattr(err, "code", "UNKNOWN")


def _check_answer(b, asked, ok, bad):
    """None when response message `b` (a Batch) fits the request: every
    sample id and error id was asked for (`asked`) and is not already in ok
    or bad (or twice in b), one label and one tensor row per sample id;
    otherwise why not (the node's answer is malformed: DATA_LOSS)."""
    ids = b.sample_ids.tolist()
    seen = set()
    for what, sid in [("sample_ids", s) for s in ids] + [("errors", e.sample_id)
                                                            for e in b.errors]:
        if sid not in asked:
            return f"{what}: sample {sid} was not asked for"
        if sid in ok or sid in bad or sid in seen:
            return f"{what}: sample {sid} sent twice"
        seen.add(sid)
    if len(b.labels) != len(ids):
        return f"labels: {len(b.labels)} for {len(ids)} sample ids"
    if ids and (b.images.ndim < 1 or b.images.shape[0] != len(ids)):
        rows = b.images.shape[0] if b.images.ndim else 0
        return f"tensor.shape: {rows} rows for {len(ids)} sample ids"
    return None


def discover(spec) -> List[str]:
    """Targets from a list of "host:port" or one "dns:NAME:PORT" (every
    address NAME resolves to, sorted): a headless Service's DNS name."""
    if isinstance(spec, str):
        if spec.startswith("dns:"):
            name, _, port = spec[4:].rpartition(":")
            infos = socket.getaddrinfo(name, int(port), type=socket.SOCK_STREAM)
            addrs = sorted({i[4][0] for i in infos})
            return [f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addrs]
        return [spec]
    return list(spec)


@functools.lru_cache(maxsize=1 << 16)
def rendezvous_score(node: str, partition: int) -> int:
    """sha256(node + "/" + decimal partition), first 8 bytes big-endian: the
    twin of the C++ fleet::RendezvousScore (server/fleet/placement.h), which
    the C++ FleetClient and placements use; both pin the same values."""
    return int.from_bytes(hashlib.sha256(f"{node}/{partition}".encode()).digest()[:8], "big")


def verify_score(seed: int, epoch: int, position: int) -> float:
    """sha256(decimal seed + "/" + epoch + "/" + position), first 8 bytes
    big-endian, over 2**64: in [0, 1). FleetClient(verify_fraction=f)
    verifies the positions scoring below f, the same ones on every rerun."""
    h = hashlib.sha256(f"{seed}/{epoch}/{position}".encode()).digest()[:8]
    return int.from_bytes(h, "big") / float(1 << 64)


def _answer_key(kind, val):
    """What two replicas' answers for one sample must share: ("ok", label,
    dtype, shape, tensor row bytes) or ("error", code)."""
    if kind == "ok":
        a = np.ascontiguousarray(val[1])
        return ("ok", int(val[0]), a.dtype.str, a.shape, a.tobytes())
    return ("error", val[0])


def _describe_diff(a, b):
    if a[0] != b[0]:
        return f"{a[0]} vs {b[0]}"
    if a[0] == "error":
        return f"error {a[1]} vs {b[1]}"
    what = []
    if a[1] != b[1]:
        what.append(f"label {a[1]} vs {b[1]}")
    if a[2:4] != b[2:4]:
        what.append(f"tensor {a[2]}{list(a[3])} vs {b[2]}{list(b[3])}")
    elif a[4] != b[4]:
        n = sum(x != y for x, y in zip(a[4], b[4]))
        what.append(f"tensor bytes differ ({n} of {len(a[4])})")
    return ", ".join(what)


REPLICA_ROUTINGS = ("first", "spread")


def choose(partition: int, live_holders: Sequence[str],
           spread_key: Optional[int] = None) -> Optional[str]:
    """The replica serving `partition` among `live_holders` (None when there
    is none). spread_key None (replica_routing "first"): the one with the
    highest (rendezvous_score(node, partition), node). spread_key g (a
    global batch number, replica_routing "spread"): the holders sorted by
    (score, node) descending, the one at index (g + partition) mod their
    count, so consecutive global batches rotate a partition over its
    replicas. The twin of the C++ FleetChooseReplica
    (client/cpp/fleet/fleet_client.h); both pin the same picks."""
    if not live_holders:
        return None
    if spread_key is None:
        return max(live_holders, key=lambda n: (rendezvous_score(n, partition), n))
    ranked = sorted(live_holders, key=lambda n: (rendezvous_score(n, partition), n),
                    reverse=True)
    return ranked[(spread_key + partition) % len(ranked)]


# -- pure request building (no I/O, no clock): FleetClient calls these, and
# so does the fleet simulator (bench/fleet/simulate.py), so both build the
# same node requests from the same plan.


def slice_items(plan, g: int, rank: int, trainers: int):
    """Trainer `rank` of `trainers`' slice of global batch g of `plan` (a
    fleet_plan.GlobalPlan): ({position: (sample_id, partition)},
    {partition: [(position, sample_id)]} in position order)."""
    lo, hi = plan.slice(g, rank, trainers)
    want = {}
    parts: Dict[int, list] = {}
    for pos, (sid, part) in zip(range(lo, hi), plan.range(lo, hi)):
        want[pos] = (sid, part)
        parts.setdefault(part, []).append((pos, sid))
    return want, parts


def group_by_node(items_by_part, assign, exclude=None):
    """{partition: [(pos, sid)]} -> ({node: [(pos, sid)] sorted}, partitions
    without a node): one request per node. assign(partition, exclude) is
    the live replica serving it (or None); exclude a node not to choose (a
    hedge's: the node it hedges)."""
    by_node: Dict[str, list] = {}
    orphans = []
    for part, items in items_by_part.items():
        t = assign(part, exclude)
        if t is None:
            orphans.append(part)
            continue
        by_node.setdefault(t, []).extend(items)
    for items in by_node.values():
        items.sort()
    return by_node, orphans


def hedge_after(latencies, quantile, minimum, samples) -> Optional[float]:
    """Seconds after which a node request is hedged: the `quantile` of
    `latencies` (the client's recent request latencies of the request's
    size class, pooled over all nodes), at least `minimum`; None while
    there are fewer than `samples` of them."""
    lat = sorted(latencies)
    if len(lat) < samples:
        return None
    i = min(len(lat) - 1, max(0, math.ceil(quantile * len(lat)) - 1))
    return max(minimum, lat[i])


def hedge_class(n: int) -> int:
    """The size class of a node request of `n` samples: floor(log2(n))
    (0 for n <= 1). Hedging judges a request against the recent latencies
    of its class, pooled over all nodes (docs/protocol.md, "Hedged
    requests"), so a 1-sample request is not judged against 64-sample ones."""
    return max(1, int(n)).bit_length() - 1


def split_hedge(items_by_part, live_holders, exclude=None):
    """{partition: [(pos, sid)]} -> ({node: [(pos, sid)] sorted}, partitions
    without another live replica): a hedge's requests. live_holders(p): the
    live nodes holding partition p; exclude: a node (or set of nodes) not
    to ask (the hedged request's). The items whose partitions have the same
    set of other live replicas are taken in position order and cut into
    contiguous chunks, one per node of that set in name order, of near-equal
    size (the first n % k chunks one longer; an empty chunk is no request);
    a node's chunks from several sets make one request. The C++ client's
    FleetSplitHedge is the same function."""
    ex = {exclude} if isinstance(exclude, str) else set(exclude or ())
    groups: Dict[tuple, list] = {}
    orphans = []
    for part, items in items_by_part.items():
        others = tuple(sorted(set(live_holders(part)) - ex))
        if not others:
            orphans.append(part)
            continue
        groups.setdefault(others, []).extend(items)
    by_node: Dict[str, list] = {}
    for others, items in groups.items():
        items.sort()
        k, n, lo = len(others), len(items), 0
        for i, node in enumerate(others):
            size = n // k + (1 if i < n % k else 0)
            if size:
                by_node.setdefault(node, []).extend(items[lo:lo + size])
            lo += size
    for items in by_node.values():
        items.sort()
    return by_node, sorted(orphans)


def missing_by_part(items, filled, delivered, want):
    """The positions of a request's `items` [(pos, sid)] that are neither
    filled in the batch (filled(pos)) nor delivered by the request so far
    (delivered(sid)), by partition (want[pos] = (sid, partition)): what a
    hedge or a fail-over asks the next replica for."""
    missing: Dict[int, list] = {}
    for pos, sid in items:
        if filled(pos) or delivered(sid):
            continue
        missing.setdefault(want[pos][1], []).append((pos, sid))
    return missing


def checkpoint_at(manifest: fp.Manifest, seed, block_samples, window, global_batch,
                  epoch, next_batch, version=1, slice_partitions=0,
                  slice_samples=0) -> fp.Checkpoint:
    """The checkpoint before global batch `next_batch` of `epoch` (past the
    epoch's last batch: batch 0 of the next epoch). Needs no node. version,
    slice_partitions, slice_samples: the plan's (v2, v3: K and L)."""
    v2 = dict(version=version, slice_partitions=slice_partitions,
              slice_samples=slice_samples) if version in (2, 3) else {}
    params = fp.PlanParams(seed=seed, epoch=epoch, block_samples=block_samples,
                           window=window, global_batch=global_batch, **v2)
    if next_batch >= fp.GlobalPlan.for_manifest(manifest, params).num_batches:
        epoch, next_batch = epoch + 1, 0
    return fp.Checkpoint(manifest.hash, seed, block_samples, window, global_batch,
                         manifest.num_partitions, epoch, next_batch, params.algorithm,
                         *((slice_partitions, slice_samples) if version in (2, 3) else ()))


@dataclass
class PositionError:
    position: int
    sample_id: int
    code: str
    message: str


@dataclass
class FleetBatch:
    """This trainer's slice of global batch `batch` of `epoch`.

    positions/sample_ids/labels/images are in position order and hold the
    samples that decoded; errors lists the others at their positions."""
    epoch: int
    batch: int
    positions: List[int]
    sample_ids: List[int]
    labels: np.ndarray
    images: np.ndarray
    errors: List[PositionError]
    served_by: Dict[int, str] = field(default_factory=dict)  # position -> node


class _Req:
    """One node request in flight (a _fetch on a pool thread): its
    positions, and what the iterating thread needs to hedge or cancel it.
    started / finished (time.monotonic) and call are set by the pool
    thread; ok / bad fill as messages arrive (what it has delivered so far)."""

    def __init__(self, target, items, hedge_of=None):
        self.target = target
        self.items = items  # [(position, sample_id)] in position order
        self.hedge_of = hedge_of  # the _Req this one hedges, or None
        self.hedged = False  # a hedge was sent for it
        self.cancelled = False  # cancelled as the loser: its failure means nothing
        self.started = None
        self.finished = None
        self.call = None  # its gRPC call in flight
        self.ok, self.bad = {}, {}
        self.fut = None


class _Node:
    def __init__(self, target):
        self.target = target
        self.partitions = set()
        self.alive = False
        self.dead_since = 0.0
        self.last_error = ""
        self.placement_version = None  # DatasetInfo.placement_version, once probed
        self.probing = False  # its probe loop (_probe_loop) runs; under the client's _lock
        # Membership (FleetClient._apply_membership): left the node set (not
        # probed, not assigned, until it is back); added and not probed yet
        # (its probe loop probes at once).
        self.removed = False
        self.probe_soon = False


def _probe_loop(client_ref, node, closing, interval):
    """Probes dead `node` of the FleetClient `client_ref` (a weak reference)
    every `interval` s, on a probe pool thread, until it answers with the
    plan's manifest (then _assign gives it its partitions from the next
    request on), or close() (which sets `closing` and cancels the probe in
    flight), or the client is gone."""
    done = False
    wait = 0.0 if node.probe_soon else interval  # a node membership added: at once
    node.probe_soon = False
    try:
        while not closing.wait(wait):
            wait = interval
            fc = client_ref()
            if fc is None:
                return
            try:
                fc._probe(node)
            except Exception as e:  # noqa: BLE001 - try again next interval
                with fc._lock:
                    node.last_error = f"{type(e).__name__}: {e}"
            with fc._lock:
                if node.alive or fc._closed or node.removed:
                    # Under the lock that _mark_dead takes: a node marked
                    # dead from now on gets a new loop.
                    node.probing, done = False, True
                    return
            del fc
    finally:
        fc = None if done else client_ref()
        if fc is not None:
            with fc._lock:
                node.probing = False


class FleetClient:
    """One trainer (rank k of T) of a fleet dataset. Request keywords
    (height, width, crop, dtype, ...) are those of Client.batches().

    A node's share of a global batch is asked for in requests of at most
    max_request_ids ids, each answered in response messages of
    response_batch samples (None: one message per request). Smaller
    messages let a node that fails mid-answer leave more behind: everything
    received before the failure is kept.

    plan_block_reads (default True) tells each node the plan's block size
    (StreamBatchesRequest.plan_block_samples): a node then reads each block
    of a record partition with one large read and serves its samples from
    memory as they are asked for. The bytes are the same either way.

    native: the receive path (module docstring); `transport` says which.

    hedge: a latency percentile in (0, 1) (default HEDGE_DEFAULT, 0.95), or
    None or 0 (never hedge): a node request slower than that percentile of
    the recent latencies of its size class over all nodes (at least
    hedge_min s, once the class has hedge_samples of them) is also sent,
    split, to the other live replicas (module docstring).

    targets_dns / targets_file / membership_interval: the node set from a
    membership instead of `targets` (pass targets=None, or pass a
    nearprep.fleet_membership.Membership as targets; module docstring).

    verify_fraction: in [0, 1] (default 0: off), the share of positions
    (those with verify_score(seed, epoch, position) below it) also fetched
    from a second replica and compared (module docstring).

    replica_routing: "first" (default: each partition from its live holder
    with the highest rendezvous score) or "spread" (global batch g of
    partition p from the live holder at index (g + p) mod their count, in
    (score, name) order: every replica serves, node load evens out; each
    node's page cache then sees all the partitions it holds, not only the
    ~1/R it is first for). Fail-overs and verification choose the same way
    among the holders they may use; a hedge is split over all the other
    live holders (split_hedge). See choose().

    Credentials: Client's tls=, root_certificates=, private_key=,
    certificate_chain=, tls_server_name=, token=, token_file= are sent to
    every node alike (or pass a ready client=)."""

    def __init__(self, targets, dataset, *, manifest, seed=0, block_samples=64,
                 window=256, global_batch=256, trainers=1, rank=0, prefetch=2,
                 rpc_timeout=10.0, probe_interval=0.5, on_wait=None, on_event=None,
                 max_request_ids=256, response_batch=None, client=None,
                 plan_block_reads=True, native=None, plan_version=1, slice_partitions=4,
                 slice_samples=None, hedge=HEDGE_DEFAULT, hedge_min=0.05, hedge_samples=4,
                 verify_fraction=0.0, targets_dns=None, targets_file=None,
                 membership_interval=None, replica_routing="first", **request_kw):
        self.manifest = manifest if isinstance(manifest, fp.Manifest) else fp.load_manifest(manifest)
        fp.check_trainers(global_batch, trainers)
        # The plan's algorithm (docs/protocol.md): 1, or 2 or 3 with at most
        # K = slice_partitions partitions per slice of L = slice_samples
        # positions (None: G / T, this client's slice).
        self.plan_kw = (dict(version=plan_version, slice_partitions=slice_partitions,
                             slice_samples=(global_batch // trainers if slice_samples is None
                                            else slice_samples))
                        if plan_version in (2, 3) else dict(version=plan_version))
        fp.check_v2(fp.PlanParams(global_batch=global_batch, **self.plan_kw))
        if not 0 <= rank < trainers:
            raise ValueError(f"rank: must be in [0, {trainers}), got {rank}")
        self.dataset = dataset
        self.seed, self.block_samples, self.window = seed, block_samples, window
        self.global_batch, self.trainers, self.rank = global_batch, trainers, rank
        self.prefetch = max(1, prefetch)
        self.rpc_timeout = rpc_timeout
        self.probe_interval = probe_interval
        self.on_wait = on_wait or (lambda msg: None)
        self.on_event = on_event or (lambda msg: None)
        # Replica routing (docs/protocol.md, "The client"): which live
        # holder serves a partition in global batch g (choose()).
        if replica_routing not in REPLICA_ROUTINGS:
            raise ValueError(f"replica_routing: must be one of {', '.join(REPLICA_ROUTINGS)}, "
                             f"got {replica_routing!r}")
        self.replica_routing = replica_routing
        if max_request_ids < 1:
            raise ValueError(f"max_request_ids: must be >= 1, got {max_request_ids}")
        if response_batch is not None and response_batch < 1:
            raise ValueError(f"response_batch: must be >= 1 or None, got {response_batch}")
        self.max_request_ids = max_request_ids
        self.response_batch = response_batch
        # Hedged requests (docs/protocol.md, "Hedged requests"): off (None
        # or 0) or the latency percentile in (0, 1) after which a node
        # request is also sent, split, to the other replicas; never sooner
        # than hedge_min s, and only once its size class has hedge_samples
        # latencies.
        if hedge is not None and (isinstance(hedge, bool) or not isinstance(hedge, (int, float))
                                  or not (hedge == 0 or 0.0 < hedge < 1.0)):
            raise ValueError(f"hedge: must be None or 0 (off) or a latency percentile in "
                             f"(0, 1), got {hedge!r}")
        if isinstance(hedge_min, bool) or not isinstance(hedge_min, (int, float)) \
                or not hedge_min >= 0.0:
            raise ValueError(f"hedge_min: must be a number of seconds >= 0, got {hedge_min!r}")
        if (isinstance(hedge_samples, bool) or not isinstance(hedge_samples, int)
                or not 1 <= hedge_samples <= HEDGE_WINDOW):
            raise ValueError(f"hedge_samples: must be an integer in [1, {HEDGE_WINDOW}], "
                             f"got {hedge_samples!r}")
        # Verification (docs/python.md, "Fleets"): the share
        # of positions also fetched from a second replica and compared.
        if (isinstance(verify_fraction, bool) or not isinstance(verify_fraction, (int, float))
                or not 0.0 <= verify_fraction <= 1.0):
            raise ValueError(f"verify_fraction: must be a number in [0, 1], "
                             f"got {verify_fraction!r}")
        self.verify_fraction = float(verify_fraction)
        self.hedge = None if not hedge else float(hedge)
        self.hedge_min = float(hedge_min)
        self.hedge_samples = hedge_samples
        # Membership (nearprep.fleet_membership): the node set from a DNS
        # name or a targets file, followed between batches (_apply_membership).
        # targets may also be a ready fleet_membership.Membership.
        self._membership = _fm.make_membership(targets_dns, targets_file, membership_interval,
                                                on_event=self.on_event)
        if isinstance(targets, _fm.Membership) and self._membership is None:
            self._membership, targets = targets, None
        if self._membership is not None and targets is not None:
            self._membership.close()
            raise ValueError("targets: give a target list or targets_dns / targets_file, "
                             "not both")
        self._membership_generation, self._targets = (
            self._membership.current() if self._membership else (0, discover(targets)))
        self._own_client = client is None
        # TLS and token keywords (nearprep.client.CREDENTIAL_ARGS) reach every node alike.
        creds = {k: request_kw.pop(k) for k in CREDENTIAL_ARGS if k in request_kw}
        # A node answers at most a trainer's slice of a global batch per
        # request, in messages of at most response_batch (else 256) samples:
        # a message larger than the request allows is refused when received
        # (RESOURCE_EXHAUSTED: fail over) before it is parsed or copied. A client=
        # passed in keeps its own limit.
        # The request template (validated like Client.batches(); the message
        # module is the one every Client uses) sizes that limit.
        self._template = build_request(_stubs.load()[0], dataset, batch_size=1, seed=seed,
                                       error_policy="skip", **request_kw)
        limit = max_batch_message_bytes(
            self._template, max(1, min(global_batch // trainers, response_batch or 256)))
        self._client = client or Client(self._targets, native=False, rpc_timeout=rpc_timeout,
                                        max_receive_bytes=limit, **creds)
        # Probes use the client's grpcio channels; streams this transport.
        try:
            # The client's public connection object (nearprep.Connection):
            # the message module and whether the channels use TLS.
            conn = self._client.connection(self._targets[0])
            self._pb2 = conn.pb2
            use_native = _transport.want_native(native, conn.secure,
                                                self._client.channel_options)
        except Exception:
            if self._own_client:
                self._client.close()
            raise
        if use_native:
            # Free receive buffers kept: what the requests of `prefetch`
            # global batches hold in flight, about one per node and batch.
            self._transport = _transport.NativeTransport(
                self._client, max_free_buffers=(self.prefetch + 2) * len(self._targets))
        else:
            self._transport = _transport.GrpcioTransport(self._client)
        self._template.manifest_hash = self.manifest.hash
        # The plan's blocks, so a node reads each block of a record partition
        # once, whole, and serves its samples from memory (a read hint).
        self._template.plan_block_samples = block_samples if plan_block_reads else 0
        self._nodes = {t: _Node(t) for t in self._targets}
        self._version_mix = None  # the distinct versions last reported as mixed
        self._lock = threading.Lock()
        self._closed = False
        self._closing = threading.Event()  # set by close(): ends the probe loops
        self._calls = set()  # calls in flight, cancelled by close()
        # Hedges run beside the requests they hedge: twice the threads, so
        # that a hedge never queues behind the slow requests it works around.
        # Verification requests likewise run beside the requests they check.
        workers = (max(4, 2 * len(self._targets)) * (2 if self.hedge is not None else 1)
                   * (2 if self.verify_fraction > 0 else 1))
        self._pool = _futures.ThreadPoolExecutor(max_workers=workers)
        # Per request size class (hedge_class), over all nodes: the durations
        # (s) of its last HEDGE_WINDOW requests; a request cancelled as a
        # hedge race's loser counts with the time it had taken so far (a
        # lower bound). Pooled, so that a node slow on every request is
        # hedged (its own window would hold only its slow latencies).
        self._latency = collections.defaultdict(lambda: collections.deque(maxlen=HEDGE_WINDOW))
        # Background probes of dead nodes (_probe_dead), at most one per node
        # in flight: a pool of their own, so that a probe waiting out a
        # black-holed node's rpc_timeout never holds up a request.
        # (A membership may add nodes: room for them; threads start lazily.)
        self._probe_pool = _futures.ThreadPoolExecutor(
            max_workers=len(self._targets) if self._membership is None
            else max(len(self._targets), MEMBERSHIP_POOL),
            thread_name_prefix="nearprep-fleet-probe")
        self._epoch = None
        self._next_batch = 0
        self.stats = {"requests": 0, "failovers": 0, "duplicates_dropped": 0,
                      "kept_partial": 0, "waits": 0, "samples": 0, "retries": 0,
                      "hedges": 0, "hedge_wins": 0, "verified": 0,
                      "verify_mismatches": 0, "verify_unresolved": 0}
        self._pid = os.getpid()
        _live_clients.add(self)
        for n in self._nodes.values():
            self._probe(n, check_mix=False, initial=True)
        self._check_version_mix()
        self._probe_dead()

    @property
    def transport(self):
        """"native" or "grpcio": how this client receives batches."""
        return self._transport.name

    # -- nodes -------------------------------------------------------------

    def _list_datasets(self, target):
        """ListDatasets on `target` through the client's grpcio channel, as a
        call close() cancels (a probe of a black-holed node would otherwise
        wait out its rpc_timeout after close): the DatasetInfo messages, or
        NearprepError."""
        conn = self._client.connection(target)
        pb2 = conn.pb2
        channel = conn.channel
        method = channel.unary_unary("/nearprep.v1.Preprocessor/ListDatasets",
                                     request_serializer=lambda r: r.SerializeToString(),
                                     response_deserializer=None)
        with self._lock:
            if self._closed:
                raise NearprepError("client is closed", code="CANCELLED", target=target)
            call = method.future(pb2.ListDatasetsRequest(), timeout=self._client.rpc_timeout,
                                 metadata=conn.metadata)
            self._calls.add(call)
        try:
            raw = call.result()
        except grpc.RpcError as e:
            if _code_name(e) == "UNAVAILABLE":
                # Not connected: the next probe (and request) gets a fresh
                # channel, which connects at once, instead of this one's
                # reconnect backoff (a node restarted on its port answered
                # its probes only 5 to 15 s later).
                conn.reset(channel)
            raise from_rpc_error(e, target) from None
        except grpc.FutureCancelledError:  # cancelled by close()
            raise NearprepError("client is closed", code="CANCELLED", target=target) from None
        finally:
            with self._lock:
                self._calls.discard(call)
        try:
            return pb2.ListDatasetsResponse.FromString(raw).datasets
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
            raise NearprepError(f"malformed ListDatasetsResponse from {target}: "
                                f"{type(e).__name__}: {e}", code="DATA_LOSS",
                                target=target) from None

    def _probe(self, node, check_mix=True, initial=False):
        """Probes `node` (ListDatasets) and updates its state under _lock
        (_assign reads it on the consumer's thread while a pool thread
        probes). Reports through on_event: at start (`initial`) a node that
        fails its probe; later a node that comes back ("is live again"), a
        node whose manifest differs (once per distinct answer) and a
        placement version changed since the last probe. After close()
        nothing is reported."""
        info, why, answered = None, None, False
        try:
            infos = self._list_datasets(node.target)
            answered = True
            info = next((d for d in infos if d.name == self.dataset), None)
            if info is None:
                why = f"no dataset {self.dataset!r}"
            elif info.manifest_hash != self.manifest.hash:
                why = (f"manifest {info.manifest_hash or '(none)'} differs from "
                       f"the plan's {self.manifest.hash}")
        except NearprepError as e:
            why = str(e)
        events = []
        with self._lock:
            if self._closed or node.removed:
                return
            was_alive, old_why = node.alive, node.last_error
            if why is None:
                # Partitions first: _assign takes a node that is alive.
                node.partitions = set(info.partitions_held)
                node.alive = True
                old, node.placement_version = (node.placement_version,
                                               int(getattr(info, "placement_version", 0)))
                if old is not None and old != node.placement_version:
                    events.append(f"{node.target}: placement version {old} -> "
                                  f"{node.placement_version}")
                if not was_alive and not initial:
                    events.append(f"node {node.target} is live again")
            else:
                node.alive, node.last_error = False, why
                node.dead_since = time.monotonic()
                if initial:
                    state = "unreachable" if not answered else "not serving the plan's dataset"
                    events.append(f"node {node.target} {state} at start: {why}; probed again "
                                  f"every {self.probe_interval:g} s until it answers")
                elif answered and info is not None and why != old_why:
                    events.append(f"{node.target}: {why}")
        for message in events:
            self.on_event(message)  # outside the lock: it may call back
        if why is None and check_mix:
            self._check_version_mix()

    def _check_version_mix(self):
        """Reports live nodes on different placement versions (a rollout),
        once per set of versions, and their agreeing again."""
        message = None
        with self._lock:
            live = {t: n.placement_version for t, n in self._nodes.items()
                    if n.alive and n.placement_version is not None}
            distinct = frozenset(live.values())
            if len(distinct) > 1 and distinct != self._version_mix:
                self._version_mix = distinct
                shown = ", ".join(f"{t}={v}" for t, v in sorted(live.items()))
                message = ("placement versions differ across live nodes "
                           f"(rollout in progress): {shown}")
            elif len(distinct) == 1 and self._version_mix is not None:
                self._version_mix = None
                message = f"placement versions agree again: {next(iter(distinct))}"
        if message:
            self.on_event(message)  # outside the lock: it may call back

    def placement_versions(self) -> Dict[str, int]:
        """{node: placement version} as last probed (0: no placement)."""
        with self._lock:
            return {t: n.placement_version for t, n in self._nodes.items()
                    if n.placement_version is not None}

    def probe(self) -> Dict[str, int]:
        """Probes every node now (ListDatasets): liveness, partitions held and
        placement versions (reported through on_event); returns
        placement_versions()."""
        for n in list(self._nodes.values()):
            self._probe(n, check_mix=False)
        self._check_version_mix()
        return self.placement_versions()

    def _mark_dead(self, target, why):
        with self._lock:
            n = self._nodes[target]
            was_alive = n.alive
            n.alive, n.last_error, n.dead_since = False, why, time.monotonic()
        if was_alive:
            self.on_event(f"node {target} marked dead: {why}")
        self._probe_dead()

    def _probe_dead(self):
        """Starts a background probe loop (_probe_loop, on the probe pool)
        for each dead node that has none. Called after the start probes,
        when a node is marked dead and at each batch start (a node a
        probe() found dead); never waits for a probe."""
        with self._lock:
            if self._closed:
                return
            due = [n for n in self._nodes.values()
                   if not n.alive and not n.probing and not n.removed]
            for n in due:
                n.probing = True
                # A weak reference: a loop keeps no dropped client alive
                # (its __del__ closes it, which ends the loop).
                self._probe_pool.submit(_probe_loop, weakref.ref(self), n, self._closing,
                                        max(self.probe_interval, 0.01))

    def _apply_membership(self):
        """Takes the membership's latest node set (between batches: at each
        batch start): a node that left is removed like a dead one (no new
        request, no probes), a node that appeared (or came back) is added
        dead and probed at once, so the rejoin path makes it live. Requests
        in flight stay where they are."""
        if self._membership is None:
            return
        gen, targets = self._membership.current()
        events, where = [], self._membership.describe
        with self._lock:
            if gen == self._membership_generation or self._closed:
                return
            self._membership_generation = gen
            want = set(targets)
            for t, n in self._nodes.items():
                if t not in want and not n.removed:
                    n.removed, n.alive = True, False
                    n.last_error, n.dead_since = f"removed from {where}", time.monotonic()
                    events.append(f"node {t} removed by membership ({where}): treated as dead")
                elif t in want and n.removed:
                    n.removed, n.probe_soon = False, True
                    events.append(f"node {t} added by membership ({where}): probing it")
            for t in targets:
                if t not in self._nodes:
                    n = _Node(t)
                    n.probe_soon, n.last_error = True, "added, not probed yet"
                    n.dead_since = time.monotonic()
                    self._nodes[t] = n
                    events.append(f"node {t} added by membership ({where}): probing it")
        for message in events:
            self.on_event(message)
        self._probe_dead()

    def live_nodes(self) -> List[str]:
        with self._lock:
            return sorted(t for t, n in self._nodes.items() if n.alive)

    def _assign(self, partition, exclude=None, g=0) -> Optional[str]:
        """The live replica of `partition` serving it in global batch g
        (replica_routing; choose()); exclude: a node (or a set of nodes) not
        to choose."""
        ex = {exclude} if isinstance(exclude, str) else set(exclude or ())
        holders = [t for t in self._live_holders(partition) if t not in ex]
        return choose(partition, holders,
                      g if self.replica_routing == "spread" else None)

    # -- one node request ----------------------------------------------------

    def _fetch(self, req, epoch):
        """The node request `req` (a _Req: req.target, req.items
        [(position, sample_id)] in position order). Returns (ok, bad,
        failure): {sample_id: (label, image)} and {sample_id: (code, message)}
        for what arrived, and None, or the grpc.RpcError / NearprepError that
        ended the requests early; then ok and bad hold what the node had
        delivered before it failed (earlier requests of this fetch and earlier
        messages of the failed stream), which the caller keeps. A malformed
        message (_check_answer, or one that does not parse) ends the request
        with DATA_LOSS and is dropped whole. A status STATUS_ACTIONS says to
        retry asks the node again for what it still owes (SAME_NODE_RETRIES
        times at most). ok and bad are req.ok and req.bad, filled as
        messages arrive (the iterating thread reads them to hedge only what
        is still missing); req.started and req.finished time the request."""
        target = req.target
        ids = [sid for _, sid in req.items]
        ok, bad = req.ok, req.bad
        req.started = time.monotonic()
        try:
            for lo in range(0, len(ids), self.max_request_ids):
                chunk = ids[lo:lo + self.max_request_ids]
                attempt = 0
                while True:
                    try:
                        self._fetch_chunk(target, epoch, chunk, ok, bad, owner=req)
                        break
                    except (grpc.RpcError, NearprepError) as e:
                        if (status_action(_code_name(e)) != "retry"
                                or attempt >= SAME_NODE_RETRIES):
                            raise
                        attempt += 1
                        with self._lock:
                            self.stats["retries"] += 1
                        self.on_event(f"node {target}: {_code_name(e)}: "
                                      f"{e.details() if isinstance(e, grpc.RpcError) else e}"
                                      "; asking it again")
        except (grpc.RpcError, NearprepError) as e:
            req.finished = time.monotonic()
            return ok, bad, e
        req.finished = time.monotonic()
        return ok, bad, None

    def _fetch_chunk(self, target, epoch, chunk, ok, bad, owner=None):
        """One request for the ids of `chunk` not yet in ok or bad; adds what
        arrives to them; raises as _fetch describes. owner: the _Req it
        belongs to (its call is recorded there, for a hedge's cancel)."""
        asked = [s for s in chunk if s not in ok and s not in bad]
        if not asked:
            return
        asked_set = set(asked)
        req = self._pb2.StreamBatchesRequest()
        req.CopyFrom(self._template)
        req.epoch = epoch
        req.batch_size = min(len(asked), self.response_batch or len(asked))
        req.sample_ids.extend(asked)
        # Batch objects; grpc.RpcError (NativeRpcError on the native
        # path) with the final status when the call fails.
        with self._lock:
            if self._closed:
                raise NearprepError("client is closed", code="CANCELLED", target=target)
            if owner is not None and owner.cancelled:
                raise NearprepError("hedge: cancelled", code="CANCELLED", target=target)
            _, call = self._transport.open(target, req, timeout=self.rpc_timeout)
            self._calls.add(call)
            if owner is not None:
                owner.call = call
            self.stats["requests"] += 1
        malformed = None
        try:
            it = iter(call)
            while True:
                try:
                    b = next(it)
                except StopIteration:
                    break
                except (ValueError, NearprepError) as e:
                    if isinstance(e, NearprepError) and e.code != "DATA_LOSS":
                        raise
                    # The message does not parse (tensor bytes that do not
                    # fit its shape, an undecodable payload): WireError,
                    # DataLossError.
                    malformed = f"{getattr(e, 'message', None) or e}"
                    break
                malformed = _check_answer(b, asked_set, ok, bad)
                if malformed:
                    break
                for i, sid in enumerate(b.sample_ids.tolist()):
                    ok[sid] = (int(b.labels[i]), b.images[i])
                for e in b.errors:
                    bad[e.sample_id] = (e.code, e.message)
        finally:
            if malformed:
                call.cancel()
            with self._lock:
                self._calls.discard(call)
                if owner is not None and owner.call is call:
                    owner.call = None
        if malformed:
            raise NearprepError(f"DATA_LOSS: {target}: malformed answer: {malformed}",
                                code="DATA_LOSS", target=target)
        missing = [s for s in asked if s not in ok and s not in bad]
        if missing:
            raise NearprepError(f"UNAVAILABLE: {target}: stream ended without "
                                f"{len(missing)} samples", code="UNAVAILABLE", target=target)

    # -- a global batch --------------------------------------------------------

    def _plan(self, epoch):
        params = fp.PlanParams(seed=self.seed, epoch=epoch, block_samples=self.block_samples,
                               window=self.window, global_batch=self.global_batch,
                               **self.plan_kw)
        return fp.GlobalPlan.for_manifest(self.manifest, params)

    def _submit(self, epoch, items_by_part):
        """Submits requests for {partition: [(pos, sid)]}; returns [_Req]
        and the partitions without a live replica. (Hedges go out through
        _hedge: split_hedge.)"""
        # Every position of one request is in one global batch g = pos // G.
        gs = {part: items[0][0] // self.global_batch for part, items in items_by_part.items()}
        by_node, orphans = group_by_node(items_by_part,
                                         lambda part, ex: self._assign(part, ex, gs[part]))
        out = []
        for t, items in by_node.items():
            r = _Req(t, items)
            r.fut = self._pool.submit(self._fetch, r, epoch)
            out.append(r)
        return out, orphans

    def _start_batch(self, plan, epoch, g):
        self._apply_membership()  # nodes a membership added or removed
        self._probe_dead()  # (probe() may have found a node dead)
        want, parts = slice_items(plan, g, self.rank, self.trainers)
        pending, orphans = self._submit(epoch, parts)
        # Verification requests go out with the batch's (to the next replica
        # of each position's first node), so they overlap its answers.
        verify = []
        if self.verify_fraction > 0:
            vitems = []
            for r in pending:
                vitems += [(pos, sid, {r.target}) for pos, sid in r.items
                           if verify_score(self.seed, epoch, pos) < self.verify_fraction]
            verify = self._submit_second(epoch, want, vitems)
        return {"g": g, "want": want, "pending": pending, "orphans": orphans,
                "ok": {}, "bad": {}, "by": {}, "verify": verify}

    # -- hedged requests ---------------------------------------------------------

    def _hedge_after(self, r) -> Optional[float]:
        """Seconds after which `r` is hedged: the `hedge` percentile of the
        last HEDGE_WINDOW latencies of its size class (hedge_class of its
        sample count, over all nodes), at least hedge_min; None while the
        class has fewer than hedge_samples."""
        with self._lock:
            lat = list(self._latency[hedge_class(len(r.items))])
        return hedge_after(lat, self.hedge, self.hedge_min, self.hedge_samples)

    def _record_latency(self, r, end=None):
        if r.started is None:
            return
        with self._lock:
            self._latency[hedge_class(len(r.items))].append(
                (end or r.finished or time.monotonic()) - r.started)

    def _live_holders(self, partition) -> List[str]:
        """The live nodes holding `partition`."""
        with self._lock:
            return [t for t, n in self._nodes.items() if n.alive and partition in n.partitions]

    def _hedge(self, epoch, st, r):
        """Sends the positions of `r` that are still missing (neither filled
        nor delivered by r so far) to all the other live replicas of their
        partitions, split among them (split_hedge); returns the hedge
        requests."""
        r.hedged = True
        missing = missing_by_part(r.items, lambda pos: pos in st["ok"] or pos in st["bad"],
                                  lambda sid: sid in r.ok or sid in r.bad, st["want"])
        if not missing:
            return []
        by_node, _ = split_hedge(missing, self._live_holders, r.target)  # no other: none
        hedges = []
        for t, items in sorted(by_node.items()):  # name order, as the C++ client
            h = _Req(t, items, r)
            h.fut = self._pool.submit(self._fetch, h, epoch)
            hedges.append(h)
        if hedges:
            n = sum(len(h.items) for h in hedges)
            with self._lock:
                self.stats["hedges"] += len(hedges)
            self.on_event(f"hedge: node {r.target} has not answered {n} samples of epoch "
                          f"{epoch} batch {st['g']} after "
                          f"{(time.monotonic() - r.started) * 1000:.0f} ms (its p"
                          f"{self.hedge * 100:g} latency, at least {self.hedge_min:g} s); "
                          f"asked {', '.join(h.target for h in hedges)} too")
        return hedges

    def _cancel(self, r):
        """Cancels `r`, a hedge race's loser (its failure then means nothing)."""
        with self._lock:
            r.cancelled = True
            call = r.call
        if call is not None:
            call.cancel()
        self._record_latency(r, end=r.finished or time.monotonic())

    # -- verification ------------------------------------------------------------

    def _submit_second(self, epoch, want, items):
        """Requests for items [(pos, sid, nodes to exclude)], each to the live
        replica of its partition chosen among the others; returns [_Req]
        (positions with no such replica are left out)."""
        by_node: Dict[str, list] = {}
        for pos, sid, exclude in items:
            t = self._assign(want[pos][1], exclude=exclude, g=pos // self.global_batch)
            if t is not None:
                by_node.setdefault(t, []).append((pos, sid))
        out = []
        for t, its in by_node.items():
            its.sort()
            r = _Req(t, its)
            r.fut = self._pool.submit(self._fetch, r, epoch)
            out.append(r)
        return out

    def _collect(self, reqs):
        """Waits for verification requests; returns {pos: (node, kind, val)}
        for what they delivered. A request that failed is handled like any
        node request's failure (a fail-over code marks the node dead; what
        it delivered is still used); nothing is raised."""
        out = {}
        for r in reqs:
            ok, bad, failure = r.fut.result()
            if failure is not None:
                code = _code_name(failure)
                why = (f"{code}: {failure.details()}" if isinstance(failure, grpc.RpcError)
                       else str(failure))
                if status_action(code) == "fail over":
                    self._mark_dead(r.target, why)
                else:
                    self.on_event(f"verify: node {r.target} request failed: {why}")
            for pos, sid in r.items:
                if sid in ok:
                    out[pos] = (r.target, "ok", ok[sid])
                elif sid in bad:
                    out[pos] = (r.target, "error", bad[sid])
        return out

    def _verify(self, epoch, st):
        """Compares the chosen positions of the filled batch `st` with a
        second replica's answers (fetching again those whose verification
        request went to the node that ended up serving them, or failed), and
        settles mismatches with a third replica (class docstring)."""
        want, g = st["want"], st["g"]
        chosen = [pos for pos in sorted(want)
                  if (pos in st["ok"] or pos in st["bad"])
                  and verify_score(self.seed, epoch, pos) < self.verify_fraction]
        if not chosen:
            return
        second = self._collect(st["verify"])
        again = [(pos, want[pos][0], {st["by"][pos]}) for pos in chosen
                 if pos not in second or second[pos][0] == st["by"][pos]]
        if again:
            second.update(self._collect(self._submit_second(epoch, want, again)))

        def first(pos):
            if pos in st["ok"]:
                return st["by"][pos], "ok", st["ok"][pos]
            return st["by"][pos], "error", st["bad"][pos]

        mismatched = []
        verified = 0
        for pos in chosen:
            if pos not in second or second[pos][0] == st["by"][pos]:
                continue  # no other live replica answered for it
            verified += 1
            a, b = first(pos), second[pos]
            ka, kb = _answer_key(a[1], a[2]), _answer_key(b[1], b[2])
            if ka != kb:
                mismatched.append((pos, a, b, ka, kb))
        with self._lock:
            self.stats["verified"] += verified
            self.stats["verify_mismatches"] += len(mismatched)
        if not mismatched:
            return
        third = self._collect(self._submit_second(
            epoch, want, [(pos, want[pos][0], {a[0], b[0]}) for pos, a, b, _, _ in mismatched]))
        for pos, a, b, ka, kb in mismatched:
            sid = want[pos][0]
            head = (f"verify: epoch {epoch} batch {g} position {pos} sample {sid}: nodes "
                    f"{a[0]} and {b[0]} disagree ({_describe_diff(ka, kb)})")
            c = third.get(pos)
            kc = _answer_key(c[1], c[2]) if c is not None else None
            if kc is not None and kc in (ka, kb):
                liar, honest = (b, a) if kc == ka else (a, b)
                self.on_event(f"{head}; node {c[0]} agrees with {honest[0]}: "
                              f"{liar[0]} is in the minority")
                if liar is a:  # the batch takes the majority's answer
                    st["ok"].pop(pos, None)
                    st["bad"].pop(pos, None)
                    (st["ok"] if b[1] == "ok" else st["bad"])[pos] = b[2]
                    st["by"][pos] = b[0]
                self._mark_dead(liar[0], f"verify: answered sample {sid} (epoch {epoch}) "
                                         f"unlike {honest[0]} and {c[0]}")
                continue
            with self._lock:
                self.stats["verify_unresolved"] += 1
            why = (f"node {c[0]} agrees with neither" if c is not None
                   else "no third live replica")
            self.on_event(f"{head}; unresolved ({why}): keeping {a[0]}'s answer")

    # -- assembling a batch ----------------------------------------------------------

    def _merge(self, st, r, ok, bad):
        """Fills the positions of st still empty from r's results (the first
        answer per position wins); returns how many it filled."""
        pos_of = {sid: pos for pos, sid in r.items}
        kept = 0
        for result, into in ((ok, st["ok"]), (bad, st["bad"])):
            for sid, val in result.items():
                pos = pos_of.get(sid)
                if pos is None or pos in st["ok"] or pos in st["bad"]:
                    self.stats["duplicates_dropped"] += 1
                    continue
                into[pos], st["by"][pos] = val, r.target
                kept += 1
        if r.hedge_of is not None:
            self.stats["hedge_wins"] += kept
        return kept

    def _finish_batch(self, epoch, st):
        want = st["want"]
        waited_since = None
        pending = list(st["pending"])  # _Req in flight
        orphans = list(st["orphans"])  # partitions without a live replica
        st["pending"], st["orphans"] = [], []
        retry_parts: Dict[int, list] = {}

        def filled(pos):
            return pos in st["ok"] or pos in st["bad"]

        while True:
            if retry_parts:
                new, orph = self._submit(epoch, retry_parts)
                pending.extend(new)
                orphans.extend(orph)
                retry_parts = {}
            if not pending:
                parts = {}
                for part in sorted(set(orphans)):
                    items = [(pos, sid) for pos, (sid, p) in want.items()
                             if p == part and not filled(pos)]
                    if items:
                        parts[part] = items
                if not parts:
                    break
                # Dead nodes are probed in the background (_probe_loop), not
                # here: re-requests to live replicas never wait for a probe,
                # and with orphans this polls every probe_interval, so a node
                # that answers is used on the next pass.
                pending, orphans = self._submit(epoch, parts)
                if orphans and not pending:
                    now = time.monotonic()
                    waited_since = waited_since or now
                    self.stats["waits"] += 1
                    self.on_wait(f"epoch {epoch} batch {st['g']}: no live replica for "
                                 f"partitions {sorted(orphans)} (waiting "
                                 f"{now - waited_since:.1f} s; live nodes {self.live_nodes()})")
                    time.sleep(self.probe_interval)
                continue
            # Wait for the next answer, or the next request due for a hedge.
            timeout = None
            if self.hedge is not None:
                now = time.monotonic()
                for r in list(pending):
                    if r.hedged or r.hedge_of is not None or r.fut.done():
                        continue
                    if r.started is None:  # queued for a thread: look again soon
                        due = max(self.hedge_min, 0.005)
                    else:
                        after = self._hedge_after(r)
                        if after is None:
                            continue
                        due = r.started + after - now
                        if due <= 0:
                            pending.extend(self._hedge(epoch, st, r))
                            continue
                    timeout = due if timeout is None else min(timeout, due)
            done, _ = _futures.wait([r.fut for r in pending], timeout=timeout,
                                    return_when=_futures.FIRST_COMPLETED)
            # First answer first: it wins the positions both answered.
            for r in sorted((r for r in pending if r.fut in done),
                            key=lambda r: r.finished or 0.0):
                if r not in pending:
                    continue  # cancelled (and merged) as the loser of one before it
                pending.remove(r)
                ok, bad, failure = r.fut.result()
                if failure is not None:
                    e = failure
                    code = _code_name(e)
                    # A retry status here has had its retries on the node:
                    # fail over.
                    if status_action(code) == "raise":
                        if isinstance(e, grpc.RpcError):
                            raise from_rpc_error(e, r.target) from None
                        raise e
                    why = (f"{code}: {e.details()}" if isinstance(e, grpc.RpcError)
                           else str(e))
                    self._mark_dead(r.target, why)
                    with self._lock:
                        self.stats["failovers"] += 1
                else:
                    self._record_latency(r)
                # What the node delivered is kept even when it then failed
                # (its bytes are keyed by (seed, epoch, sample id) like any
                # replica's); only the positions still empty are re-requested.
                kept = self._merge(st, r, ok, bad)
                if failure is not None:
                    self.stats["kept_partial"] += kept
                # A hedge race decided: a request whose positions are all
                # filled, or delivered by itself so far, keeps what it
                # delivered and is cancelled.
                for o in list(pending):
                    if not (o.hedged or o.hedge_of is not None):
                        continue
                    if all(filled(pos) or sid in o.ok or sid in o.bad for pos, sid in o.items):
                        pending.remove(o)
                        self._cancel(o)
                        self._merge(st, o, dict(o.ok), dict(o.bad))
                # Positions still empty that no request in flight covers
                # (a hedge, or the request it hedges) are asked again.
                covered = {pos for o in pending for pos, _ in o.items}
                for part, items in missing_by_part(
                        r.items, lambda pos: filled(pos) or pos in covered,
                        lambda sid: False, want).items():
                    retry_parts.setdefault(part, []).extend(items)
        if self.verify_fraction > 0:
            self._verify(epoch, st)
        positions = sorted(st["ok"])
        images = (np.stack([st["ok"][p][1] for p in positions]) if positions
                  else np.zeros((0,), dtype=np.uint8))
        errors = [PositionError(p, want[p][0], *st["bad"][p]) for p in sorted(st["bad"])]
        self.stats["samples"] += len(positions)
        return FleetBatch(epoch, st["g"], positions, [want[p][0] for p in positions],
                          np.array([st["ok"][p][0] for p in positions], dtype=np.int64),
                          images, errors, dict(st["by"]))

    # -- iteration ---------------------------------------------------------------

    def epoch(self, epoch, start_batch=0, stop_batch=None, step=1):
        """Yields this trainer's FleetBatch for global batches start_batch,
        start_batch + step, ... below (stop_batch or the end of the epoch).
        checkpoint() after a yielded batch resumes right after it (with
        step > 1, e.g. one of several DataLoader workers, the batches in
        between are someone else's: the caller keeps the checkpoint)."""
        if step < 1:
            raise ValueError(f"step: must be >= 1, got {step}")
        if start_batch < 0:
            raise ValueError(f"start_batch: must be >= 0, got {start_batch}")
        plan = self._plan(epoch)
        end = plan.num_batches if stop_batch is None else min(stop_batch, plan.num_batches)
        window = []
        g = start_batch
        while g < end or window:
            while g < end and len(window) < self.prefetch:
                window.append(self._start_batch(plan, epoch, g))
                g += step
            st = window.pop(0)
            batch = self._finish_batch(epoch, st)
            self._epoch, self._next_batch = epoch, st["g"] + 1
            yield batch

    def resume(self, checkpoint, stop_batch=None):
        """Continues where `checkpoint` (a fleet_plan.Checkpoint or its
        dict) stands, with this client's trainer count."""
        c = checkpoint if isinstance(checkpoint, fp.Checkpoint) else fp.Checkpoint.from_dict(checkpoint)
        mine = (self.manifest.hash, self.seed, self.block_samples, self.window,
                self.global_batch, self.manifest.num_partitions, self.plan_kw)
        theirs = (c.manifest_hash, c.seed, c.block_samples, c.window, c.global_batch,
                  c.num_partitions, c.plan_kw())
        if mine != theirs:
            raise ValueError(f"checkpoint: plan {theirs} differs from this client's {mine}")
        c.check_position(self.manifest.num_samples)  # past the epoch's end: refused
        return self.epoch(c.epoch, c.next_batch, stop_batch)

    def checkpoint(self, epoch=None, next_batch=None) -> fp.Checkpoint:
        e = self._epoch if epoch is None else epoch
        nb = self._next_batch if next_batch is None else next_batch
        return checkpoint_at(self.manifest, self.seed, self.block_samples, self.window,
                             self.global_batch, e, nb, **self.plan_kw)

    def close(self):
        # Requests still in flight (prefetch) are cancelled and their
        # threads joined, so that none is inside a gRPC call when the
        # process exits (a DataLoader worker's end). Also run by __del__ and
        # at interpreter exit; from a pool thread (garbage collection there)
        # it cancels without joining itself.
        with self._lock:
            if self._closed:
                return
            self._closed = True
            calls = list(self._calls)
        self._closing.set()
        if getattr(self, "_membership", None) is not None:
            self._membership.close()
        _live_clients.discard(self)
        for call in calls:
            call.cancel()
        # Probes in flight were among the calls cancelled and the probe loops
        # woken: their threads end now, reporting nothing (_probe checks
        # _closed).
        me = threading.current_thread()
        for pool in (self._pool, self._probe_pool):
            in_pool = me in getattr(pool, "_threads", ())
            pool.shutdown(wait=not in_pool, cancel_futures=True)
        self._transport.close()
        if self._own_client:
            self._client.close()

    def __del__(self):
        try:
            if hasattr(self, "_pool"):
                self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
