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

import numpy as np

from .plan import (philox4x32, _PHILOX_M0, _PHILOX_M1, _PHILOX_W0,
                   _PHILOX_W1)

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


def _draws(i: np.ndarray, w1, w2: int, seed: int, epoch: int, tag: int) -> np.ndarray:
    """_draw for every counter word 0 in `i` at once (uint64 array): the
    same Philox4x32-10, one numpy operation per step over all lanes. `w1`
    is one int or an array of i's shape (a lane's counter word 1)."""
    m32 = np.uint64(_M32)
    c0 = np.asarray(i, dtype=np.uint64) & m32
    if isinstance(w1, np.ndarray):
        c1 = w1.astype(np.uint64) & m32
    else:
        c1 = np.full_like(c0, w1 & _M32)
    c2 = np.full_like(c0, w2 & _M32)
    c3 = np.full_like(c0, ((epoch & 0xFFFFFF) << 8) | tag)
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    m0, m1, s32 = np.uint64(_PHILOX_M0), np.uint64(_PHILOX_M1), np.uint64(32)
    for rnd in range(10):
        if rnd > 0:
            k0 = (k0 + _PHILOX_W0) & _M32
            k1 = (k1 + _PHILOX_W1) & _M32
        p0 = m0 * c0
        p1 = m1 * c2
        c0, c1, c2, c3 = ((p1 >> s32) ^ c1 ^ np.uint64(k0), p1 & m32,
                          (p0 >> s32) ^ c3 ^ np.uint64(k1), p0 & m32)
    return c0 | (c1 << s32)


def _shuffle(a: list, draws: np.ndarray) -> list:
    """Fisher-Yates of `a` in place with draws[i] for step i (i = len-1 down
    to 1; draws[0] unused): swap(a[i], a[draws[i] % (i + 1)])."""
    n = len(a)
    if n < 2:
        return a
    steps = np.arange(n, dtype=np.uint64)
    js = (draws[1:] % (steps[1:] + np.uint64(1))).tolist()
    for i in range(n - 1, 0, -1):
        j = js[i - 1]
        a[i], a[j] = a[j], a[i]
    return a


def partition_block_draw(seed, epoch, partition, i):
    return _draw(i, partition, 0, seed, epoch, K_TAG_PARTITION_BLOCKS)


def partition_window_draw(seed, epoch, partition, window, i):
    return _draw(i, window, partition, seed, epoch, K_TAG_PARTITION_WINDOW)


def round_order_draw(seed, epoch, rnd, i):
    return _draw(i, rnd, 0, seed, epoch, K_TAG_ROUND_ORDER)


def partition_stream(n: int, partition: int, p: PlanParams) -> List[int]:
    """Local offsets of partition `partition` (n samples) in stream order:
    the definition, one scalar draw per step (GlobalPlan computes the same
    thing a window at a time with vectorised draws)."""
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
    return _shuffle(list(range(c)), _draws(np.arange(c), rnd, 0, p.seed, p.epoch,
                                           K_TAG_ROUND_ORDER))


def round_orders(c: int, first: int, count: int, p: PlanParams) -> np.ndarray:
    """round_order(c, r, p) for rounds r in [first, first + count): a
    (count, c) int64 array, the draws of all rounds in one vectorised
    Philox call and each Fisher-Yates step applied to every round at once."""
    rounds = np.arange(first, first + count, dtype=np.uint64)
    i = np.broadcast_to(np.arange(c, dtype=np.uint64), (count, c))
    w1 = np.broadcast_to(rounds[:, None], (count, c))
    draws = _draws(np.ascontiguousarray(i), np.ascontiguousarray(w1), 0, p.seed, p.epoch,
                   K_TAG_ROUND_ORDER)
    if count < 32:  # few rounds: a Python shuffle per round is cheaper
        return np.array([_shuffle(list(range(c)), row) for row in draws], dtype=np.int64)
    order = np.broadcast_to(np.arange(c, dtype=np.int64), (count, c)).copy()
    rows = np.arange(count)
    for step in range(c - 1, 0, -1):
        j = (draws[:, step] % np.uint64(step + 1)).astype(np.int64)
        a, b = order[rows, step].copy(), order[rows, j]
        order[rows, step] = b
        order[rows, j] = a
    return order


def _block_offsets(n: int, partition: int, p: PlanParams) -> np.ndarray:
    """S of partition_stream before the window shuffles: the blocks'
    offsets in block-permutation order (int64 array of n)."""
    b = max(p.block_samples, 1)
    nb = (n + b - 1) // b
    perm = np.array(_shuffle(list(range(nb)),
                             _draws(np.arange(nb), partition, 0, p.seed, p.epoch,
                                    K_TAG_PARTITION_BLOCKS)), dtype=np.int64)
    sizes = np.minimum(b, n - perm * b)
    firsts = np.repeat(perm * b, sizes)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return firsts + (np.arange(n, dtype=np.int64) - starts)


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
        self._blocks: Dict[int, np.ndarray] = {}
        self._windows: Dict[Tuple[int, int], List[int]] = {}
        self._rounds: Dict[int, List[int]] = {}
        self._last_hi = -1  # where the last range() call ended

    @classmethod
    def for_manifest(cls, m: Manifest, params: PlanParams) -> "GlobalPlan":
        return cls(m.partition_start, params)

    def __len__(self) -> int:
        return self.n

    @property
    def num_batches(self) -> int:
        g = self.params.global_batch
        return (self.n + g - 1) // g

    # Computed lazily and cached: a partition's block order (numpy, n_p
    # offsets), its windows as they are reached (W offsets each), and each
    # round's active partitions in round order. The first batch of an epoch
    # needs one window of each partition, not whole streams.

    def _window(self, p: int, w: int) -> List[int]:
        key = (p, w)
        win = self._windows.get(key)
        if win is None:
            blocks = self._blocks.get(p)
            if blocks is None:
                if len(self._blocks) >= 4096:
                    self._blocks.clear()
                blocks = self._blocks[p] = _block_offsets(self.sizes[p], p, self.params)
            ww = max(self.params.window, 1)
            win = blocks[w * ww:(w + 1) * ww].tolist()
            draws = _draws(np.arange(len(win)), w, p, self.params.seed, self.params.epoch,
                           K_TAG_PARTITION_WINDOW)
            if len(self._windows) >= 65536:
                self._windows.clear()
            win = self._windows[key] = _shuffle(win, draws)
        return win

    def _stream_at(self, p: int, r: int) -> int:
        ww = max(self.params.window, 1)
        return self._window(p, r // ww)[r % ww]

    def _active(self, r: int, ahead: int = 1) -> List[int]:
        """The partitions round r emits (n_p > r), in round order. On a
        miss, rounds r .. r + ahead - 1 are computed together (one
        vectorised call: per-call overhead dominates for small C)."""
        o = self._rounds.get(r)
        if o is None:
            if len(self._rounds) >= 4096:
                self._rounds.clear()
            ahead = max(1, min(ahead, 4096 - len(self._rounds), self.sorted[-1] - r))
            orders = ([round_order(len(self.sizes), r, self.params)] if ahead == 1 else
                      round_orders(len(self.sizes), r, ahead, self.params).tolist())
            for k, order in enumerate(orders):
                self._rounds[r + k] = [p for p in order if self.sizes[p] > r + k]
            o = self._rounds[r]
        return o

    def _before(self, r: int) -> int:
        k = bisect.bisect_left(self.sorted, r)
        return self.prefix[k] + r * (len(self.sorted) - k)

    def _round_of(self, position: int) -> int:
        lo, hi = 0, self.sorted[-1]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._before(mid) <= position:
                lo = mid
            else:
                hi = mid
        return lo

    def at(self, position: int) -> Tuple[int, int]:
        """(sample id, partition) at `position` (< len(self))."""
        if not 0 <= position < self.n:
            raise IndexError(f"position {position} outside [0, {self.n})")
        r = self._round_of(position)
        p = self._active(r)[position - self._before(r)]
        return self.start[p] + self._stream_at(p, r), p

    def range(self, lo: int, hi: int) -> List[Tuple[int, int]]:
        """[at(x) for x in range(lo, hi)], walking the rounds once."""
        if not 0 <= lo <= hi <= self.n:
            raise IndexError(f"positions [{lo}, {hi}) outside [0, {self.n})")
        out: List[Tuple[int, int]] = []
        if lo == hi:
            return out
        r = self._round_of(lo)
        off = lo - self._before(r)
        last = self._round_of(hi - 1)
        sequential, self._last_hi = lo == self._last_hi, hi
        while len(out) < hi - lo:
            # A caller reading on from where it stopped (one trainer, T = 1)
            # needs the following rounds next: compute 64 at a time at least.
            # Otherwise (a slice of each global batch) only those needed.
            ahead = max(last - r + 1, 64) if sequential else last - r + 1
            active = self._active(r, ahead=ahead)
            for p in active[off:off + (hi - lo - len(out))]:
                out.append((self.start[p] + self._stream_at(p, r), p))
            r, off = r + 1, 0
        return out

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
