"""PyTorch adapter of the fleet client (issue 14): trainer k of T is the
torchrun rank / world size.

    import nearprep.fleet_torch
    ds = nearprep.fleet_torch.FleetIterableDataset(
        "dns:nearprepd.data.svc.cluster.local:7070", "imagenet",
        manifest="imagenet.nearprep-manifest", seed=1, global_batch=1024,
        height=224, width=224, crop="random_resized", dtype="uint8")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    ds.set_epoch(epoch)                    # or ds.load_state_dict(ckpt)
    for images, labels in loader: ...
    ckpt = ds.state_dict()                 # the global checkpoint

Rank and world size: torch.distributed's when initialised, else $RANK /
$WORLD_SIZE (torchrun sets both), else 0 / 1; the world size must divide
global_batch. Each item is this rank's slice of one global batch, as
(images, labels) tensors in position order (samples that failed to decode
are left out; `last_errors` lists them at their positions). Use
num_workers=0: the client already fetches from every node in parallel, with
prefetch. A state_dict() taken after the rank has consumed global batch g
resumes at g + 1 with any world size.
"""

import os

import torch
import torch.utils.data

from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient


def rank_and_world():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


class FleetIterableDataset(torch.utils.data.IterableDataset):
    def __init__(self, targets, dataset, *, manifest, rank=None, world_size=None, **kw):
        super().__init__()
        r, w = rank_and_world()
        self.rank = r if rank is None else rank
        self.world_size = w if world_size is None else world_size
        self._args = (targets, dataset)
        self._kw = dict(kw, manifest=manifest)
        self._start = (0, 0)
        self._consumed = None
        self.last_errors = []
        fp.check_trainers(kw.get("global_batch", 256), self.world_size)

    def set_epoch(self, epoch):
        self._start = (epoch, 0)

    def state_dict(self):
        e, nb = self._consumed if self._consumed else self._start
        with FleetClient(*self._args, trainers=self.world_size, rank=self.rank,
                         **self._kw) as fc:
            return fc.checkpoint(e, nb).to_dict()

    def load_state_dict(self, state):
        c = fp.Checkpoint.from_dict(state)
        self._start = (c.epoch, c.next_batch)

    def __iter__(self):
        epoch, start = self._start
        with FleetClient(*self._args, trainers=self.world_size, rank=self.rank,
                         **self._kw) as fc:
            for fb in fc.epoch(epoch, start):
                self._consumed = (fb.epoch, fb.batch + 1)
                self.last_errors = fb.errors
                yield torch.from_numpy(fb.images.copy()), torch.from_numpy(fb.labels)
