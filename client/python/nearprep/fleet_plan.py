"""Fleet datasets (issue 14): the manifest and the global epoch plan.

A re-implementation of server/fleet/manifest.h and server/fleet/global_plan.h
(docs/protocol.md, "Fleet datasets", is normative); tests/python/
test_fleet_plan.py compares it with `nearprep fleet-plan`.

- Manifest: C partitions, each a run of whole shards consecutive in sorted
  shard order; its hash (SHA-256 of the file's bytes) is the dataset version.
- GlobalPlan: positions 0..N-1 of an epoch -> (sample id, partition), a pure
  function of (manifest, seed, epoch, block B, window W, global batch G);
  trainer k of T takes a contiguous slice of every global batch.
- Checkpoint: {manifest hash, plan params + algorithm version, epoch, next
  global batch}; no trainer or node state, so resuming with another T
  continues at exactly that global batch.
"""

import bisect
import hashlib
from dataclasses import dataclass, field, asdict
from typing import Dict, List, Optional, Sequence, Tuple

from .plan import philox4x32

ALGORITHM = "nearprep-fleet-plan/1"
K_TAG_PARTITION_BLOCKS = 5
K_TAG_PARTITION_WINDOW = 6
K_TAG_ROUND_ORDER = 7
_M32 = 0xFFFFFFFF


class ManifestError(ValueError):
    pass


@dataclass
class ManifestShard:
    name: str
    partition: int
    records: int
    bytes: int
    crc32c: int
    first_sample: int = 0


@dataclass
class Manifest:
    format: str
    num_partitions: int
    num_samples: int
    shards: List[ManifestShard]
    partition_start: List[int]  # C + 1 sample ids
    partition_shard: List[int]  # C + 1 shard indexes
    hash: str

    def partition_size(self, p: int) -> int:
        return self.partition_start[p + 1] - self.partition_start[p]

    def partition_of(self, sample_id: int) -> int:
        return bisect.bisect_right(self.partition_start, sample_id) - 1


def parse_manifest(data: bytes) -> Manifest:
    """Parses the text form (docs/protocol.md); ManifestError naming the line."""
    if isinstance(data, str):
        data = data.encode()
    if not data.endswith(b"\n"):
        raise ManifestError("manifest: empty or not newline-terminated")
    lines = data[:-1].decode().split("\n")

    def header(i, key):
        f = lines[i].split(" ") if i < len(lines) else []
        if len(f) != 2 or f[0] != key or not f[1].isdigit():
            raise ManifestError(f"manifest line {i + 1}: expected '{key} NUMBER'")
        return int(f[1])

    if lines[0] != "nearprep-manifest 1":
        raise ManifestError("manifest line 1: expected 'nearprep-manifest 1'")
    f = lines[1].split(" ") if len(lines) > 1 else []
    if len(f) != 2 or f[0] != "format" or f[1] not in ("tfrecord", "tar"):
        raise ManifestError("manifest line 2: expected 'format tfrecord' or 'format tar'")
    fmt = f[1]
    c = header(2, "partitions")
    n = header(3, "samples")
    shards = []
    for i in range(4, len(lines)):
        f = lines[i].split(" ")
        if len(f) != 6 or f[0] != "shard" or len(f[4]) != 8:
            raise ManifestError(f"manifest line {i + 1}: expected "
                                "'shard PARTITION RECORDS BYTES CRC32C NAME'")
        shards.append(ManifestShard(f[5], int(f[1]), int(f[2]), int(f[3]), int(f[4], 16)))
    if not shards:
        raise ManifestError("manifest: no shards")
    starts, first_shard = [0] * (c + 1), [0] * (c + 1)
    nxt, expect = 0, 0
    for i, s in enumerate(shards):
        if i > 0 and s.name <= shards[i - 1].name:
            raise ManifestError(f"manifest line {i + 5}: shards must be sorted by name")
        if s.partition not in (expect, expect + 1) or (i == 0 and s.partition != 0):
            raise ManifestError(f"manifest: shard {s.name}: partitions must be "
                                "consecutive runs 0, 1, ...")
        if i > 0 and s.partition == expect + 1:
            expect += 1
            starts[expect], first_shard[expect] = nxt, i
        s.first_sample = nxt
        nxt += s.records
    if expect + 1 != c or nxt != n:
        raise ManifestError("manifest: partitions/samples disagree with the shards")
    starts[c], first_shard[c] = nxt, len(shards)
    return Manifest(fmt, c, n, shards, starts, first_shard, hashlib.sha256(data).hexdigest())


def load_manifest(path: str) -> Manifest:
    with open(path, "rb") as f:
        return parse_manifest(f.read())


# ---------------------------------------------------------------------------
# The plan.

@dataclass(frozen=True)
class PlanParams:
    seed: int = 0
    epoch: int = 0
    block_samples: int = 64
    window: int = 256
    global_batch: int = 256


def _draw(w0: int, w1: int, w2: int, seed: int, epoch: int, tag: int) -> int:
    w3 = ((epoch & 0xFFFFFF) << 8) | tag
    out = philox4x32((w0 & _M32, w1 & _M32, w2 & _M32, w3), (seed & _M32, (seed >> 32) & _M32))
    return out[0] | (out[1] << 32)


def partition_block_draw(seed, epoch, partition, i):
    return _draw(i, partition, 0, seed, epoch, K_TAG_PARTITION_BLOCKS)


def partition_window_draw(seed, epoch, partition, window, i):
    return _draw(i, window, partition, seed, epoch, K_TAG_PARTITION_WINDOW)


def round_order_draw(seed, epoch, rnd, i):
    return _draw(i, rnd, 0, seed, epoch, K_TAG_ROUND_ORDER)


def partition_stream(n: int, partition: int, p: PlanParams) -> List[int]:
    """Local offsets of partition `partition` (n samples) in stream order."""
    b, w = max(p.block_samples, 1), max(p.window, 1)
    nb = (n + b - 1) // b
    perm = list(range(nb))
    for i in range(nb - 1, 0, -1):
        j = partition_block_draw(p.seed, p.epoch, partition, i) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    s: List[int] = []
    for blk in perm:
        s.extend(range(blk * b, min(n, (blk + 1) * b)))
    for start in range(0, n, w):
        win = start // w
        for i in range(min(w, n - start) - 1, 0, -1):
            j = partition_window_draw(p.seed, p.epoch, partition, win, i) % (i + 1)
            s[start + i], s[start + j] = s[start + j], s[start + i]
    return s


def round_order(c: int, rnd: int, p: PlanParams) -> List[int]:
    order = list(range(c))
    for i in range(c - 1, 0, -1):
        j = round_order_draw(p.seed, p.epoch, rnd, i) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def check_trainers(global_batch: int, trainers: int) -> None:
    if trainers < 1 or global_batch % trainers:
        raise ValueError(f"trainers: T = {trainers} must be >= 1 and divide the global "
                         f"batch G = {global_batch} (each trainer takes G / T positions "
                         "of every global batch)")


class GlobalPlan:
    """The global epoch plan over a manifest's partitions (any position
    computable alone: it needs one partition stream and one round order)."""

    def __init__(self, partition_start: Sequence[int], params: PlanParams):
        if len(partition_start) < 2:
            raise ValueError("partitions: at least one is needed")
        if params.epoch >= 1 << 24:
            raise ValueError(f"epoch: must be < 2^24 in a fleet plan, got {params.epoch}")
        if min(params.block_samples, params.window, params.global_batch) < 1:
            raise ValueError("block_samples, window, global_batch: must be >= 1")
        self.params = params
        self.start = list(partition_start)
        self.sizes = [self.start[i + 1] - self.start[i] for i in range(len(self.start) - 1)]
        self.sorted = sorted(self.sizes)
        self.prefix = [0]
        for s in self.sorted:
            self.prefix.append(self.prefix[-1] + s)
        self.n = self.start[-1] - self.start[0]
        self._streams: Dict[int, List[int]] = {}
        self._rounds: Dict[int, List[int]] = {}

    @classmethod
    def for_manifest(cls, m: Manifest, params: PlanParams) -> "GlobalPlan":
        return cls(m.partition_start, params)

    def __len__(self) -> int:
        return self.n

    @property
    def num_batches(self) -> int:
        g = self.params.global_batch
        return (self.n + g - 1) // g

    def _stream(self, p: int) -> List[int]:
        s = self._streams.get(p)
        if s is None:
            if len(self._streams) >= 4096:
                self._streams.clear()
            s = self._streams[p] = partition_stream(self.sizes[p], p, self.params)
        return s

    def _round(self, r: int) -> List[int]:
        o = self._rounds.get(r)
        if o is None:
            if len(self._rounds) >= 1024:
                self._rounds.clear()
            o = self._rounds[r] = round_order(len(self.sizes), r, self.params)
        return o

    def _before(self, r: int) -> int:
        k = bisect.bisect_left(self.sorted, r)
        return self.prefix[k] + r * (len(self.sorted) - k)

    def at(self, position: int) -> Tuple[int, int]:
        """(sample id, partition) at `position` (< len(self))."""
        if not 0 <= position < self.n:
            raise IndexError(f"position {position} outside [0, {self.n})")
        lo, hi = 0, self.sorted[-1]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._before(mid) <= position:
                lo = mid
            else:
                hi = mid
        r = lo
        off = position - self._before(r)
        for p in self._round(r):
            if self.sizes[p] <= r:
                continue
            if off == 0:
                return self.start[p] + self._stream(p)[r], p
            off -= 1
        raise AssertionError("unreachable")

    def slice(self, batch: int, k: int, trainers: int) -> Tuple[int, int]:
        """Positions [a, b) of trainer k of T in global batch `batch`."""
        check_trainers(self.params.global_batch, trainers)
        if not 0 <= k < trainers:
            raise ValueError(f"trainer: k = {k} must be in [0, {trainers})")
        per = self.params.global_batch // trainers
        a = min(self.n, batch * self.params.global_batch + k * per)
        return a, min(self.n, a + per)


@dataclass
class Checkpoint:
    """Where a fleet epoch stands: nothing about trainers or nodes."""
    manifest_hash: str
    seed: int
    block_samples: int
    window: int
    global_batch: int
    num_partitions: int
    epoch: int
    next_batch: int
    algorithm: str = ALGORITHM

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Checkpoint":
        if d.get("algorithm") != ALGORITHM:
            raise ValueError(f"checkpoint: algorithm {d.get('algorithm')!r} is not {ALGORITHM}")
        return cls(**d)
