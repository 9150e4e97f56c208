"""The fleet's global epoch plan (docs/protocol.md, "The global plan
(algorithm `nearprep-fleet-plan/1`)", "Plan v2 (algorithm
`nearprep-fleet-plan/2`)" and "Plan v3 (algorithm `nearprep-fleet-plan/3`)",
are normative; server/fleet/global_plan.h is the
C++ twin, and tests/python/test_fleet_plan.py compares the two through
`nearprep fleet-plan`).

Positions 0..N-1 of an epoch -> (sample id, partition), a pure function of
(the manifest's partition sizes, seed, epoch, block B, window W, global
batch G, and for v2 the slice L and partitions per slice K); trainer k of T
takes a contiguous slice of every global batch. v2 interleaves runs of
c = L / K consecutive stream positions of a partition instead of single
positions (v1 is v2's interleave with c = 1), so an aligned slice of L
positions holds at most K partitions. v3 is v2 with round r's run slots
permuted by a keyed Feistel permutation of its m_r active partitions
(computable at one slot: no O(C) round order per round).

Thread-safety: the module's functions are pure; a GlobalPlan caches what it
computed and is for one thread (each FleetClient makes its own).
"""

import bisect
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .fleet_manifest import Manifest
from .philox import (K_TAG_PARTITION_BLOCKS, K_TAG_PARTITION_WINDOW, K_TAG_ROUND_ORDER,
                     K_TAG_RUN_SLOTS, K_TAG_TAIL_ORDER, draw64, draw64_lanes, key_of,
                     philox4x32, philox4x32_lanes, plan_shuffle, word3)

__all__ = ["ALGORITHM", "ALGORITHM_V2", "ALGORITHM_V3", "ALGORITHMS", "MAX_EPOCH",
           "K_TAG_TAIL_ORDER", "K_TAG_RUN_SLOTS", "run_slot_permutation",
           "run_slot_permutations", "tail_order_draw", "tail_order", "K_TAG_PARTITION_BLOCKS",
           "K_TAG_PARTITION_WINDOW", "K_TAG_ROUND_ORDER", "PlanParams", "partition_block_draw",
           "partition_window_draw", "round_order_draw", "partition_stream", "round_order",
           "round_orders", "check_trainers", "check_v2", "GlobalPlan"]

ALGORITHM = "nearprep-fleet-plan/1"
ALGORITHM_V2 = "nearprep-fleet-plan/2"
ALGORITHM_V3 = "nearprep-fleet-plan/3"
# plan version -> algorithm name
ALGORITHMS = {1: ALGORITHM, 2: ALGORITHM_V2, 3: ALGORITHM_V3}
MAX_EPOCH = (1 << 24) - 1  # counter word 3 holds 24 bits of the epoch
# The counter tags (K_TAG_PARTITION_BLOCKS, _WINDOW, K_TAG_ROUND_ORDER,
# K_TAG_TAIL_ORDER, K_TAG_RUN_SLOTS) are nearprep.philox's, re-exported here.


@dataclass(frozen=True)
class PlanParams:
    seed: int = 0
    epoch: int = 0
    block_samples: int = 64
    window: int = 256
    global_batch: int = 256
    # Plan version (1: nearprep-fleet-plan/1, 2: /2, 3: /3).
    version: int = 1
    # v2 and v3: K partitions at most per aligned slice of L positions
    # (slice_samples; 0 = not chosen: GlobalPlan refuses it, the clients
    # and the CLI put G / T there). Run length c = L / K.
    slice_partitions: int = 4
    slice_samples: int = 0

    @property
    def algorithm(self) -> str:
        return ALGORITHMS.get(self.version, f"nearprep-fleet-plan/{self.version}")

    @property
    def run(self) -> int:
        """c: consecutive stream positions of one partition per run (v1: 1)."""
        if self.version in (2, 3) and self.slice_partitions >= 1:
            return max(self.slice_samples // self.slice_partitions, 1)
        return 1


def _draw(w0: int, w1: int, w2: int, seed: int, epoch: int, tag: int) -> int:
    """The 64-bit draw of counter {w0, w1, w2, w3(epoch, tag)} (each word
    mod 2^32), key {seed lo32, seed hi32}."""
    return draw64((w0, w1, w2, word3(tag, epoch)), key_of(seed))


def _draws(i: np.ndarray, w1, w2: int, seed: int, epoch: int, tag: int) -> np.ndarray:
    """_draw for every counter word 0 in `i` at once (uint64 array): the
    same Philox4x32-10, one numpy operation per step over all lanes. `w1`
    is one int or an array of i's shape (a lane's counter word 1)."""
    k0, k1 = key_of(seed)
    return draw64_lanes(np.asarray(i, dtype=np.uint64), w1, w2, word3(tag, epoch), k0, k1)


def partition_block_draw(seed, epoch, partition, i):
    return _draw(i, partition, 0, seed, epoch, K_TAG_PARTITION_BLOCKS)


def partition_window_draw(seed, epoch, partition, window, i):
    return _draw(i, window, partition, seed, epoch, K_TAG_PARTITION_WINDOW)


def round_order_draw(seed, epoch, rnd, i):
    return _draw(i, rnd, 0, seed, epoch, K_TAG_ROUND_ORDER)


def tail_order_draw(seed, epoch, i):
    return _draw(i, 0, 0, seed, epoch, K_TAG_TAIL_ORDER)


def tail_order(c: int, p: PlanParams) -> List[int]:
    """v2's tail order: a Fisher-Yates permutation of [0, c) (tag 9,
    counter {i, 0, 0})."""
    return plan_shuffle(list(range(c)), _draws(np.arange(c), 0, 0, p.seed, p.epoch,
                                           K_TAG_TAIL_ORDER))


def _feistel_h(m: int) -> int:
    """h: the smallest integer >= 1 with 4^h >= m."""
    h = 1
    while 4 ** h < m:
        h += 1
    return h


def run_slot_permutation(seed: int, epoch: int, rnd: int, m: int, j: int) -> int:
    """v3's pi_rnd(j), a keyed permutation of [0, m) at one point: the
    4-round Feistel network E on 2h bits (F = word 0 of Philox({right half,
    rnd, i, w3(tag 10)}) masked to h bits), applied to j and again until the
    value is < m (cycle walking)."""
    if m == 1:
        return 0
    h = _feistel_h(m)
    mask = (1 << h) - 1
    key, w3 = key_of(seed), word3(K_TAG_RUN_SLOTS, epoch)
    x = j
    while True:
        lh, rh = x >> h, x & mask
        for i in range(4):
            lh, rh = rh, lh ^ (philox4x32((rh, rnd, i, w3), key)[0] & mask)
        x = (lh << h) | rh
        if x < m:
            return x


def run_slot_permutations(seed: int, epoch: int, rnd: int, m: int, js) -> np.ndarray:
    """run_slot_permutation for every j in `js` at once (int64 array), each
    Feistel step one vectorised Philox call over the lanes still walking."""
    js = np.asarray(js, dtype=np.uint64)
    if m == 1:
        return np.zeros(js.shape, dtype=np.int64)
    h = _feistel_h(m)
    mask, sh = np.uint64((1 << h) - 1), np.uint64(h)
    k0, k1 = key_of(seed)
    w3 = word3(K_TAG_RUN_SLOTS, epoch)
    out = js.copy()
    todo = np.arange(js.size)
    while todo.size:
        x = out[todo]
        lh, rh = x >> sh, x & mask
        for i in range(4):
            f = philox4x32_lanes(rh, rnd, i, w3, k0, k1)[0] & mask
            lh, rh = rh, lh ^ f
        out[todo] = (lh << sh) | rh
        todo = todo[out[todo] >= np.uint64(m)]
    return out.astype(np.int64)


def partition_stream(n: int, partition: int, p: PlanParams) -> List[int]:
    """Local offsets of partition `partition` (n samples) in stream order:
    the definition, one scalar draw per step (GlobalPlan computes the same
    thing a window at a time with vectorised draws)."""
    b, w = max(p.block_samples, 1), max(p.window, 1)
    nb = (n + b - 1) // b
    perm = plan_shuffle(list(range(nb)),
                        lambda i: partition_block_draw(p.seed, p.epoch, partition, i))
    s: List[int] = []
    for blk in perm:
        s.extend(range(blk * b, min(n, (blk + 1) * b)))
    for start in range(0, n, w):
        win = start // w
        plan_shuffle(s, lambda i: partition_window_draw(p.seed, p.epoch, partition, win, i),
                     start, min(w, n - start))
    return s


def round_order(c: int, rnd: int, p: PlanParams) -> List[int]:
    return plan_shuffle(list(range(c)), _draws(np.arange(c), rnd, 0, p.seed, p.epoch,
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
        return np.array([plan_shuffle(list(range(c)), row) for row in draws], dtype=np.int64)
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
    perm = np.array(plan_shuffle(list(range(nb)),
                             _draws(np.arange(nb), partition, 0, p.seed, p.epoch,
                                    K_TAG_PARTITION_BLOCKS)), dtype=np.int64)
    sizes = np.minimum(b, n - perm * b)
    firsts = np.repeat(perm * b, sizes)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return firsts + (np.arange(n, dtype=np.int64) - starts)


def check_v2(params: PlanParams) -> None:
    """ValueError unless params is a valid plan version (and, for v2 and v3,
    L divides G and K divides L), naming the field."""
    if params.version not in ALGORITHMS:
        raise ValueError(f"plan_version: must be 1, 2 or 3, got {params.version!r}")
    if params.version == 1:
        return
    v = params.version
    g, ll, k = params.global_batch, params.slice_samples, params.slice_partitions
    if ll < 1 or g % ll:
        raise ValueError(f"slice_samples: L = {ll} must be >= 1 and divide the global batch "
                         f"G = {g} (plan v{v}: at most K partitions per aligned slice of L)")
    if k < 1 or ll % k:
        raise ValueError(f"slice_partitions: K = {k} must be >= 1 and divide the slice L = {ll} "
                         f"(plan v{v}: runs of L / K samples)")


def check_trainers(global_batch: int, trainers: int) -> None:
    if trainers < 1 or global_batch % trainers:
        raise ValueError(f"trainers: T = {trainers} must be >= 1 and divide the global "
                         f"batch G = {global_batch} (each trainer takes G / T positions "
                         "of every global batch)")


class GlobalPlan:
    """The global epoch plan over a manifest's partitions (any position
    computable alone: it needs one partition stream and one round order (v3:
    one slot permutation value), or for a v2/v3 tail position the tail
    order)."""

    def __init__(self, partition_start: Sequence[int], params: PlanParams):
        if len(partition_start) < 2:
            raise ValueError("partitions: at least one is needed")
        if not 0 <= params.epoch <= MAX_EPOCH:
            raise ValueError(f"epoch: must be in [0, 2^24) in a fleet plan, got {params.epoch}")
        if min(params.block_samples, params.window, params.global_batch) < 1:
            raise ValueError("block_samples, window, global_batch: must be >= 1")
        if params.window > 1 << 20:  # as the C++ plan (GlobalPlan::Create)
            raise ValueError(f"window: must be <= 1048576, got {params.window}")
        check_v2(params)
        for lo, hi in zip(partition_start, partition_start[1:]):
            if hi < lo:
                raise ValueError("partitions: starts must ascend")
            if hi - lo >= 1 << 32:  # counter words hold offsets, windows, rounds
                raise ValueError("partitions: a partition must hold < 2^32 samples")
        self.params = params
        self.start = list(partition_start)
        self.sizes = [self.start[i + 1] - self.start[i] for i in range(len(self.start) - 1)]
        # The interleave runs over runs of c stream positions: q_p whole runs
        # of each partition (v1: c = 1, q_p = n_p); the t_p left over are
        # its tail (v2), after every run of every partition.
        self.c = c = params.run
        self.q = [n // c for n in self.sizes]
        self.t = [n - c * q for n, q in zip(self.sizes, self.q)]
        self.sorted = sorted(self.q)
        self.prefix = [0]
        for s in self.sorted:
            self.prefix.append(self.prefix[-1] + s)
        self.n = self.start[-1] - self.start[0]
        self.n_main = c * self.prefix[-1]
        # v3: D, the partitions with q_p >= 1 by (q_p descending, p
        # ascending); round r's active partitions are D[0, m_r).
        self.v3 = params.version == 3
        self.d: List[int] = []
        if self.v3:  # a stable sort of -q: q descending, p ascending
            qa = np.array(self.q, dtype=np.int64)
            order = np.argsort(-qa, kind="stable")
            self.d = order[:int(np.count_nonzero(qa))].tolist()
        self._last_slot = (-1, -1, -1)  # v3: (round, slot, partition) of the last at()
        self._tails = None  # (partitions with t_p > 0 in tail order, their first positions)
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
            win = self._windows[key] = plan_shuffle(win, draws)
        return win

    def _stream_at(self, p: int, j: int) -> int:
        ww = max(self.params.window, 1)
        return self._window(p, j // ww)[j % ww]

    def _active(self, r: int, ahead: int = 1) -> List[int]:
        """The partitions round r emits (q_p > r), in round order. On a
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
                self._rounds[r + k] = [p for p in order if self.q[p] > r + k]
            o = self._rounds[r]
        return o

    def _before(self, r: int) -> int:
        """Runs before round r: sum_p min(q_p, r)."""
        k = bisect.bisect_left(self.sorted, r)
        return self.prefix[k] + r * (len(self.sorted) - k)

    def _round_of(self, z: int) -> int:
        """The round of run z (< sum_p q_p)."""
        lo, hi = 0, self.sorted[-1]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._before(mid) <= z:
                lo = mid
            else:
                hi = mid
        return lo

    def _m(self, r: int) -> int:
        """m_r = #{p : q_p > r}: round r's run slots."""
        return len(self.sorted) - bisect.bisect_right(self.sorted, r)

    def _slot_parts(self, r: int, m: int, a: int, b: int) -> List[int]:
        """v3: the partitions of round r's slots [a, b): D[pi_r(j)]. A few
        slots are drawn one at a time, more with vectorised draws."""
        p = self.params
        if b - a <= 4:
            return [self.d[run_slot_permutation(p.seed, p.epoch, r, m, j)] for j in range(a, b)]
        return [self.d[i] for i in
                run_slot_permutations(p.seed, p.epoch, r, m, np.arange(a, b)).tolist()]

    def _tail_at(self, position: int) -> Tuple[int, int]:
        """(sample id, partition) at a position >= n_main (v2's tails)."""
        if self._tails is None:
            parts = [p for p in tail_order(len(self.sizes), self.params) if self.t[p] > 0]
            firsts = [0]
            for p in parts:
                firsts.append(firsts[-1] + self.t[p])
            self._tails = (parts, firsts)
        parts, firsts = self._tails
        y = position - self.n_main
        i = bisect.bisect_right(firsts, y) - 1
        p = parts[i]
        return self.start[p] + self._stream_at(p, self.c * self.q[p] + y - firsts[i]), p

    def at(self, position: int) -> Tuple[int, int]:
        """(sample id, partition) at `position` (< len(self))."""
        if not 0 <= position < self.n:
            raise IndexError(f"position {position} outside [0, {self.n})")
        if position >= self.n_main:
            return self._tail_at(position)
        z, o = divmod(position, self.c)
        r = self._round_of(z)
        if self.v3:  # the last slot's partition is kept: at() of a run's c positions
            j = z - self._before(r)
            if self._last_slot[:2] == (r, j):
                p = self._last_slot[2]
            else:
                p = self._slot_parts(r, self._m(r), j, j + 1)[0]
                self._last_slot = (r, j, p)
        else:
            p = self._active(r)[z - self._before(r)]
        return self.start[p] + self._stream_at(p, r * self.c + o), p

    def range(self, lo: int, hi: int) -> List[Tuple[int, int]]:
        """[at(x) for x in range(lo, hi)], walking the rounds once."""
        if not 0 <= lo <= hi <= self.n:
            raise IndexError(f"positions [{lo}, {hi}) outside [0, {self.n})")
        out: List[Tuple[int, int]] = []
        sequential, self._last_hi = lo == self._last_hi, hi
        c, main_hi = self.c, min(hi, self.n_main)
        if self.v3 and lo < main_hi:  # slot by slot, each round's slots drawn together
            z, z_hi = lo // c, (main_hi - 1) // c + 1
            while z < z_hi:
                r = self._round_of(z)
                first, m = self._before(r), self._m(r)
                z_end = min(z_hi, first + m)
                for zz, p in enumerate(self._slot_parts(r, m, z - first, z_end - first), z):
                    base = r * c - zz * c
                    out += [(self.start[p] + self._stream_at(p, base + x), p)
                            for x in range(max(lo, zz * c), min(main_hi, (zz + 1) * c))]
                z = z_end
        elif lo < main_hi:
            r = self._round_of(lo // c)
            off = lo // c - self._before(r)
            last = self._round_of((main_hi - 1) // c)
            x = lo
            while x < main_hi:
                # A caller reading on from where it stopped (one trainer, T = 1)
                # needs the following rounds next: compute 64 at a time at least.
                # Otherwise (a slice of each global batch) only those needed.
                ahead = max(last - r + 1, 64) if sequential else last - r + 1
                active = self._active(r, ahead=ahead)
                if c == 1:
                    for p in active[off:off + (main_hi - x)]:
                        out.append((self.start[p] + self._stream_at(p, r), p))
                    x = min(main_hi, x + len(active) - off)
                else:
                    while off < len(active) and x < main_hi:
                        p, base = active[off], r * c - (x // c) * c
                        end = min(main_hi, (x // c + 1) * c)
                        out += [(self.start[p] + self._stream_at(p, base + y), p)
                                for y in range(x, end)]
                        x, off = end, off + 1
                r, off = r + 1, 0
        for x in range(max(lo, self.n_main), hi):
            out.append(self._tail_at(x))
        return out

    def slice(self, batch: int, k: int, trainers: int) -> Tuple[int, int]:
        """Positions [a, b) of trainer k of T in global batch `batch`."""
        check_trainers(self.params.global_batch, trainers)
        if not 0 <= k < trainers:
            raise ValueError(f"trainer: k = {k} must be in [0, {trainers})")
        per = self.params.global_batch // trainers
        a = min(self.n, batch * self.params.global_batch + k * per)
        return a, min(self.n, a + per)
