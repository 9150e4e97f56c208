"""Where a fleet epoch stands (docs/protocol.md, "The client", Checkpoint):
{manifest hash, plan params + algorithm, epoch, next global batch}. Nothing
about trainers, DataLoader workers or nodes, so resuming with another
trainer count T continues at exactly that global batch.

Thread-safety: a Checkpoint is a plain value.
"""

from dataclasses import dataclass, asdict

from .fleet_global_plan import ALGORITHM, ALGORITHMS, MAX_EPOCH

__all__ = ["Checkpoint"]


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
    # nearprep-fleet-plan/2 and /3 only (K, L); absent from a v1 checkpoint's dict.
    slice_partitions: int = 0
    slice_samples: int = 0

    @property
    def plan_version(self) -> int:
        return next((v for v, a in ALGORITHMS.items() if a == self.algorithm), 0)

    def plan_kw(self) -> dict:
        """The plan-version keywords of PlanParams / FleetClient it names."""
        if self.plan_version in (2, 3):
            return dict(version=self.plan_version, slice_partitions=self.slice_partitions,
                        slice_samples=self.slice_samples)
        return dict(version=1)

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.plan_version not in (2, 3):
            del d["slice_partitions"], d["slice_samples"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Checkpoint":
        if d.get("algorithm") not in ALGORITHMS.values():
            raise ValueError(f"checkpoint: algorithm {d.get('algorithm')!r} is not one of "
                             f"{', '.join(ALGORITHMS.values())}")
        return cls(**d)

    def check_position(self, num_samples: int) -> None:
        """ValueError naming the field unless epoch and next_batch are a
        position inside an epoch of `num_samples` samples (the manifest's):
        epoch in [0, 2^24), next_batch in [0, global batches of the epoch).
        A checkpoint past the end would resume to nothing; the ones the
        clients write never are (after the last batch they name the next
        epoch's batch 0)."""
        if type(self.epoch) is not int or not 0 <= self.epoch <= MAX_EPOCH:
            raise ValueError(f"checkpoint: epoch must be an integer in [0, 2^24) (a fleet "
                             f"plan's epochs), got {self.epoch!r}")
        if type(self.global_batch) is not int or self.global_batch < 1:
            raise ValueError(f"checkpoint: global_batch must be an integer >= 1, got "
                             f"{self.global_batch!r}")
        nb = (num_samples + self.global_batch - 1) // self.global_batch
        if type(self.next_batch) is not int or not 0 <= self.next_batch < nb:
            raise ValueError(f"checkpoint: next_batch must be in [0, {nb}) (epoch {self.epoch} "
                             f"has {nb} global batches of G = {self.global_batch}), got "
                             f"{self.next_batch!r}")
