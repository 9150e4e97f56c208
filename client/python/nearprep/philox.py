"""Philox4x32-10 for the plans, one scalar and one numpy form.

The one Philox of the Python client: nearprep.plan (the single-node epoch
plan, pure Python) and the fleet plan (nearprep.fleet_global_plan, numpy)
both draw from here. docs/protocol.md ("Philox4x32-10") is normative;
server/data/epoch_plan.cc is the C++ twin, and the known answers of
Random123's kat_vectors are checked by tests/python/test_plan.py.

- philox4x32(counter, key): one block, Python ints (no numpy needed).
- philox4x32_lanes(c0, c1, c2, c3, k0, k1): the same function over arrays
  of counters (one numpy operation per step over all lanes); numpy is
  imported only when it is called, so nearprep.plan stays numpy-free.
- draw64(counter, key) / draw64_lanes(...): words 0 | 1 << 32 of the block,
  the 64-bit draw every Fisher-Yates step of the plans uses.
- The counter tags (K_TAG_*, PLAN_TAGS: server/plan/philox.h's kTag*, one
  place for the whole client) and word3(tag, upper): the counter's word 3,
  upper 24 bits above the tag byte.
- plan_shuffle(a, draw): the protocol's Fisher-Yates (server/plan/philox.h
  PlanShuffle), the one loop of the client's plans.

Thread-safety: pure functions.
"""

from __future__ import annotations

from typing import Sequence, Tuple

__all__ = ["M32", "PHILOX_M0", "PHILOX_M1", "PHILOX_W0", "PHILOX_W1", "philox4x32",
           "philox4x32_lanes", "draw64", "draw64_lanes", "key_of",
           "K_TAG_PERMUTATION", "K_TAG_SAMPLE_PARAMS", "K_TAG_BLOCK_PERMUTATION",
           "K_TAG_WINDOW_SHUFFLE", "K_TAG_PARTITION_BLOCKS", "K_TAG_PARTITION_WINDOW",
           "K_TAG_ROUND_ORDER", "K_TAG_BATCH_MIX", "K_TAG_TAIL_ORDER", "K_TAG_RUN_SLOTS",
           "PLAN_TAGS",
           "word3", "plan_shuffle"]

M32 = 0xFFFFFFFF
PHILOX_M0 = 0xD2511F53  # multipliers
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9  # Weyl key increments
PHILOX_W1 = 0xBB67AE85
_ROUNDS = 10

# Counter tags: the low 8 bits of counter word 3, one per kind of draw, so no
# two plans read the same counter (server/plan/philox.h kTag*; every tag of
# the client is here).
K_TAG_PERMUTATION = 1        # epoch order (nearprep.plan)
K_TAG_SAMPLE_PARAMS = 2      # per-sample parameters
K_TAG_BLOCK_PERMUTATION = 3  # block shuffle: blocks
K_TAG_WINDOW_SHUFFLE = 4     # block shuffle: windows
K_TAG_PARTITION_BLOCKS = 5   # fleet plan: a partition's blocks
K_TAG_PARTITION_WINDOW = 6   # fleet plan: windows
K_TAG_ROUND_ORDER = 7        # fleet plan: round order
K_TAG_BATCH_MIX = 8          # MixUp / CutMix (nearprep.batch_mix)
K_TAG_TAIL_ORDER = 9         # fleet plan v2: tails
K_TAG_RUN_SLOTS = 10         # fleet plan v3: the run slots' Feistel permutation
PLAN_TAGS = (K_TAG_PERMUTATION, K_TAG_SAMPLE_PARAMS, K_TAG_BLOCK_PERMUTATION,
             K_TAG_WINDOW_SHUFFLE, K_TAG_PARTITION_BLOCKS, K_TAG_PARTITION_WINDOW,
             K_TAG_ROUND_ORDER, K_TAG_BATCH_MIX, K_TAG_TAIL_ORDER, K_TAG_RUN_SLOTS)
assert len(set(PLAN_TAGS)) == len(PLAN_TAGS) and all(0 < t < 256 for t in PLAN_TAGS)


def word3(tag: int, upper: int = 0) -> int:
    """Counter word 3 of a plan's draw: (upper mod 2^24) << 8 | tag. What
    `upper` holds is each draw's (docs/protocol.md): the epoch's high bits
    (epoch >> 32) for the single-node order, the window's for its shuffle,
    (epoch >> 32 mod 2^16) << 8 | block for sample parameters, the epoch
    (< 2^24) for the fleet plan."""
    return ((int(upper) & 0xFFFFFF) << 8) | (tag & 0xFF)


def key_of(seed: int) -> Tuple[int, int]:
    """The Philox key of a request's 64-bit seed: {seed lo32, seed hi32}."""
    return seed & M32, (seed >> 32) & M32


def philox4x32(counter: Sequence[int], key: Sequence[int]) -> Tuple[int, int, int, int]:
    """Philox4x32-10 (Salmon et al., SC'11) of a 4-word counter, 2-word key.
    Each word is taken mod 2^32."""
    c0, c1, c2, c3 = (int(w) & M32 for w in counter)
    k0, k1 = (int(w) & M32 for w in key)
    for rnd in range(_ROUNDS):
        if rnd > 0:
            k0 = (k0 + PHILOX_W0) & M32
            k1 = (k1 + PHILOX_W1) & M32
        p0 = PHILOX_M0 * c0
        p1 = PHILOX_M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & M32,
                          (p0 >> 32) ^ c3 ^ k1, p0 & M32)
    return c0, c1, c2, c3


def draw64(counter: Sequence[int], key: Sequence[int]) -> int:
    """Words 0 | 1 << 32 of philox4x32(counter, key)."""
    out = philox4x32(counter, key)
    return out[0] | (out[1] << 32)


def philox4x32_lanes(c0, c1, c2, c3, k0: int, k1: int):
    """philox4x32 of every lane at once: c0..c3 are integer numpy arrays of
    one shape or ints (the same word for every lane), each word taken mod
    2^32; the key is one for all lanes. Returns the four output words as
    uint64 arrays (of c0's shape when c0 is an array)."""
    import numpy as np
    m32 = np.uint64(M32)

    def word(w):  # an int stays a numpy scalar (cheaper than a full array)
        if isinstance(w, np.ndarray):
            return w.astype(np.uint64) & m32
        return np.uint64(int(w) & M32)

    c0, c1, c2, c3 = word(c0), word(c1), word(c2), word(c3)
    k0, k1 = int(k0) & M32, int(k1) & M32
    m0, m1, s32 = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1), np.uint64(32)
    for rnd in range(_ROUNDS):
        if rnd > 0:
            k0 = (k0 + PHILOX_W0) & M32
            k1 = (k1 + PHILOX_W1) & M32
        p0 = m0 * c0  # < 2^64: a 32-bit word times a 32-bit multiplier
        p1 = m1 * c2
        c0, c1, c2, c3 = ((p1 >> s32) ^ c1 ^ np.uint64(k0), p1 & m32,
                          (p0 >> s32) ^ c3 ^ np.uint64(k1), p0 & m32)
    return c0, c1, c2, c3


def draw64_lanes(c0, c1, c2, c3, k0: int, k1: int):
    """draw64 of every lane (a uint64 array)."""
    import numpy as np
    o0, o1, _, _ = philox4x32_lanes(c0, c1, c2, c3, k0, k1)
    return o0 | (o1 << np.uint64(32))


def plan_shuffle(a, draw, start: int = 0, n=None):
    """The protocol's Fisher-Yates over a[start:start + n] (n: to the end),
    in place; returns `a`. For i = n-1 down to 1, swap a[start + i] with
    a[start + draw(i) % (i + 1)] (server/plan/philox.h PlanShuffle).

    `draw` is a function of the step i, or the draws already made: a
    sequence indexed by i (draw[0] unused), such as a numpy uint64 array of
    draw64_lanes (its remainders are then taken in one numpy operation)."""
    if n is None:
        n = len(a) - start
    if n < 2:
        return a
    if callable(draw):
        for i in range(n - 1, 0, -1):
            j = start + draw(i) % (i + 1)
            a[start + i], a[j] = a[j], a[start + i]
        return a
    if hasattr(draw, "dtype"):  # numpy draws: all remainders at once
        import numpy as np
        steps = np.arange(1, n, dtype=np.uint64)
        js = (np.asarray(draw[1:n], dtype=np.uint64) % (steps + np.uint64(1))).tolist()
    else:
        js = [int(draw[i]) % (i + 1) for i in range(1, n)]
    for i in range(n - 1, 0, -1):
        j = start + js[i - 1]
        a[start + i], a[j] = a[j], a[start + i]
    return a
