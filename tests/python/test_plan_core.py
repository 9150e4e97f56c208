"""The Python plan core (issue 34, item 4): one Fisher-Yates
(philox.plan_shuffle), one counter word 3 (philox.word3), the counter tags
in one place (philox.K_TAG_*, the C++ registry's kTag* of
server/plan/philox.h), and nearprep.plan's __all__ complete. Pure Python
(numpy only for the array form); no build needed."""

import inspect
import os
import random
import re

import numpy as np

from nearprep import batch_mix, fleet_global_plan, philox, plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _naive_shuffle(a, draw):
    """The protocol's text, written out: for i = n-1 down to 1, swap a[i]
    with a[draw(i) mod (i + 1)]."""
    a = list(a)
    for i in range(len(a) - 1, 0, -1):
        j = draw(i) % (i + 1)
        a[i], a[j] = a[j], a[i]
    return a


def test_plan_shuffle_is_the_protocols_fisher_yates_in_every_form():
    rng = random.Random(5)
    for n in (0, 1, 2, 3, 17, 256):
        draws = [rng.getrandbits(64) for _ in range(n)]
        want = _naive_shuffle(range(n), lambda i: draws[i])
        assert philox.plan_shuffle(list(range(n)), lambda i: draws[i]) == want
        assert philox.plan_shuffle(list(range(n)), draws) == want
        assert philox.plan_shuffle(list(range(n)), np.array(draws, dtype=np.uint64)) == want
    assert want != list(range(n))  # 256 elements: not the identity
    # A sub-range [start, start + n) is shuffled in place, the rest untouched.
    a = list(range(20))
    draws = [rng.getrandbits(64) for _ in range(8)]
    philox.plan_shuffle(a, lambda i: draws[i], 5, 8)
    assert a[:5] == list(range(5)) and a[13:] == list(range(13, 20))
    assert a[5:13] == [5 + v for v in _naive_shuffle(range(8), lambda i: draws[i])]


def test_word3_is_the_documented_layout():
    e = (0xABCDEF12 << 32) | 7
    assert philox.word3(philox.K_TAG_PERMUTATION, e >> 32) == ((0xCDEF12 << 8) | 1)
    assert philox.word3(philox.K_TAG_SAMPLE_PARAMS,
                        (((e >> 32) & 0xFFFF) << 8) | 11) == (0xEF12 << 16) | (11 << 8) | 2
    assert philox.word3(philox.K_TAG_ROUND_ORDER, 5) == (5 << 8) | 7
    assert philox.word3(philox.K_TAG_TAIL_ORDER, (1 << 24) + 3) == (3 << 8) | 9


def test_the_tags_are_one_table_and_the_cpp_registrys():
    text = open(os.path.join(ROOT, "server", "plan", "philox.h")).read()
    cpp = {m.group(1): int(m.group(2))
           for m in re.finditer(r"constexpr uint32_t kTag(\w+) = (\d+);", text)}
    assert len(cpp) >= 9, cpp
    py = {name[len("K_TAG_"):]: getattr(philox, name)
          for name in dir(philox) if name.startswith("K_TAG_")}
    # kTagWindowShuffle <-> K_TAG_WINDOW_SHUFFLE: the same names, spelled
    # in each language's style.
    assert {re.sub(r"(?<!^)([A-Z])", r"_\1", k).upper(): v for k, v in cpp.items()} == py
    assert sorted(philox.PLAN_TAGS) == sorted(py.values())
    # The plans use these, not copies of their own.
    for module in (plan, fleet_global_plan):
        for name in dir(module):
            if name.startswith("K_TAG_"):
                assert getattr(module, name) is getattr(philox, name), (module, name)
    assert batch_mix.TAG_BATCH_MIX == philox.K_TAG_BATCH_MIX


def test_plan_all_lists_every_public_name():
    public = {n for n, v in vars(plan).items()
              if not n.startswith("_")
              and (inspect.isfunction(v) or inspect.isclass(v) or n.isupper())
              and getattr(v, "__module__", plan.__name__) in (plan.__name__, philox.__name__)}
    assert {"block_shuffled_order", "block_permutation_draw", "window_draw",
            "K_TAG_BLOCK_PERMUTATION", "K_TAG_WINDOW_SHUFFLE", "plan_shuffle"} <= public
    assert public - set(plan.__all__) == set()
    assert all(hasattr(plan, n) for n in plan.__all__)
