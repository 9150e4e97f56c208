"""Fleet datasets (issue 14): the manifest, the global epoch plan and the
checkpoint, in one namespace (`from nearprep import fleet_plan as fp`).

A facade over three modules, each a re-implementation of its C++ twin
(docs/protocol.md, "Fleet datasets", is normative; tests/python/
test_fleet_plan.py compares them with `nearprep manifest` / `fleet-plan`):

- nearprep.fleet_manifest: C partitions, each a run of whole shards
  consecutive in sorted shard order; its hash (SHA-256 of the file's bytes)
  is the dataset version (server/fleet/manifest.h).
- nearprep.fleet_global_plan: positions 0..N-1 of an epoch -> (sample id,
  partition), a pure function of (manifest, seed, epoch, block B, window W,
  global batch G, and for nearprep-fleet-plan/2 the slice L and K); trainer
  k of T takes a contiguous slice of every global batch
  (server/fleet/global_plan.h).
- nearprep.fleet_checkpoint: {manifest hash, plan params + algorithm
  version, epoch, next global batch}; no trainer or node state, so resuming
  with another T continues at exactly that global batch.

Philox4x32-10 itself is nearprep.philox, shared with nearprep.plan.
"""

from .fleet_manifest import (  # noqa: F401
    ManifestError, ManifestShard, Manifest, parse_manifest, load_manifest, serialize_manifest,
    name_bytes)
from .fleet_global_plan import (  # noqa: F401
    ALGORITHM, ALGORITHM_V2, ALGORITHM_V3, ALGORITHMS, MAX_EPOCH, K_TAG_PARTITION_BLOCKS,
    K_TAG_PARTITION_WINDOW, K_TAG_ROUND_ORDER, K_TAG_TAIL_ORDER, K_TAG_RUN_SLOTS,
    run_slot_permutation, run_slot_permutations, PlanParams, partition_block_draw,
    partition_window_draw, round_order_draw,
    tail_order_draw, tail_order,
    partition_stream, round_order, round_orders, check_trainers, check_v2, GlobalPlan,
    _draw, _draws, _block_offsets)
from .fleet_checkpoint import Checkpoint  # noqa: F401
from .philox import philox4x32  # noqa: F401

__all__ = ["ManifestError", "ManifestShard", "Manifest", "parse_manifest", "load_manifest",
           "serialize_manifest", "name_bytes",
           "ALGORITHM", "ALGORITHM_V2", "ALGORITHM_V3", "ALGORITHMS", "MAX_EPOCH",
           "K_TAG_PARTITION_BLOCKS", "K_TAG_PARTITION_WINDOW", "K_TAG_ROUND_ORDER",
           "K_TAG_TAIL_ORDER", "K_TAG_RUN_SLOTS", "run_slot_permutation",
           "run_slot_permutations", "PlanParams",
           "partition_block_draw", "partition_window_draw", "round_order_draw",
           "tail_order_draw", "tail_order", "partition_stream", "round_order", "round_orders",
           "check_trainers", "check_v2", "GlobalPlan", "Checkpoint"]
