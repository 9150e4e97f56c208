"""Where a fleet epoch stands (docs/protocol.md, "The client", Checkpoint):
{manifest hash, plan params + algorithm, epoch, next global batch}. Nothing
about trainers, DataLoader workers or nodes, so resuming with another
trainer count T continues at exactly that global batch.

Thread-safety: a Checkpoint is a plain value.
"""

from dataclasses import dataclass, asdict

from .fleet_global_plan import ALGORITHM, MAX_EPOCH

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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Checkpoint":
        if d.get("algorithm") != ALGORITHM:
            raise ValueError(f"checkpoint: algorithm {d.get('algorithm')!r} is not {ALGORITHM}")
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
