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

Thread-safety: pure functions.
"""

from __future__ import annotations

from typing import Sequence, Tuple

__all__ = ["M32", "PHILOX_M0", "PHILOX_M1", "PHILOX_W0", "PHILOX_W1", "philox4x32",
           "philox4x32_lanes", "draw64", "draw64_lanes", "key_of"]

M32 = 0xFFFFFFFF
PHILOX_M0 = 0xD2511F53  # multipliers
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9  # Weyl key increments
PHILOX_W1 = 0xBB67AE85
_ROUNDS = 10


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
