"""PyTorch adapter of the fleet client (issue 14): trainer k of T is the
torchrun rank / world size.

    import nearprep.fleet_torch as nft
    ds = nft.FleetIterableDataset(
        "dns:nearprepd.data.svc.cluster.local:7070", "imagenet",
        manifest="imagenet.nearprep-manifest", seed=1, global_batch=1024,
        height=224, width=224, crop="random_resized", dtype="uint8")
    loader = nft.FleetDataLoader(ds, num_workers=2, persistent_workers=True,
                                 pin_memory=True)
    ds.set_epoch(epoch)                    # or ds.load_state_dict(ckpt)
    for images, labels in loader: ...
    ckpt = ds.state_dict()                 # the global checkpoint

Rank and world size: rank= / world_size= when given, else torch.distributed's
when initialised, else $RANK / $WORLD_SIZE (torchrun sets both), else 0 / 1
(nearprep.torch.rank_and_world: $WORLD_SIZE > 1 without $RANK is an error),
fixed when the dataset is made and shipped to DataLoader workers; iterating
(or starting workers) when torch.distributed now names another rank is an
error. The world size must divide global_batch. Each item is this rank's slice of one global batch, as
(images, labels) tensors in position order (samples that failed to decode
are left out; `ds.last_errors` lists them at their positions).

DataLoader workers: FleetDataLoader(ds, num_workers=W, ...) is a
torch.utils.data.DataLoader(ds, batch_size=None, ...) whose worker w of W
serves the global batches g = start + w, start + w + W, ... with its own
FleetClient (made inside the worker, so no gRPC channel crosses a fork), so
the DataLoader's in-order round robin over the workers yields the global
batches in order. Workers carry each batch's (epoch, global batch) to the
main process, where FleetDataLoader records it as it hands the batch over:
ds.state_dict() therefore names the batch after the last one the training
loop received, never one a worker merely prefetched. Workers start with
multiprocessing_context="spawn" unless told otherwise: a trainer process has
often used gRPC already, and gRPC's core is not safe to use in a child
forked after that (docs/python.md has what the tests saw with fork).
Starting spawned workers costs about a second or more (each imports torch):
persistent_workers=True pays it once; the start set in the main process
(set_epoch, load_state_dict) then reaches the running workers through
shared memory when the next iteration begins. Each worker keeps `prefetch`
global batches in flight, so W workers fetch W * prefetch ahead.
Iterating the dataset directly, or through a plain DataLoader with
num_workers=0, works as before; a plain DataLoader with num_workers > 0 is
refused (its main process could not see what was consumed).

A state_dict() taken after the loop received global batch g resumes at
g + 1 with any world size and any num_workers.
"""

import inspect
import multiprocessing
import multiprocessing.context
from typing import List, NamedTuple

import torch
import torch.utils.data

from nearprep import fleet_plan as fp
from nearprep.fleet import FleetClient, checkpoint_at
from nearprep.torch import _WorkerInit, _in_worker_exit_hook, _rank_mismatch
from nearprep.torch import rank_and_world as _rank_and_world

_DEFAULTS = {k: v.default for k, v in inspect.signature(FleetClient).parameters.items()
             if k in ("seed", "block_samples", "window", "global_batch")}


def rank_and_world():
    """(rank, world_size): nearprep.torch.rank_and_world's rules (torch.distributed
    when initialised, else $RANK / $WORLD_SIZE, else 0 / 1; an error when the
    environment names several processes but not this one's rank)."""
    return _rank_and_world()[:2]


class FleetItem(NamedTuple):
    """What a DataLoader worker hands the main process: one global batch's
    slice and where it stands in the plan (FleetDataLoader unpacks it)."""
    images: torch.Tensor
    labels: torch.Tensor
    epoch: int
    batch: int
    errors: List


class FleetIterableDataset(torch.utils.data.IterableDataset):
    def __init__(self, targets, dataset, *, manifest, rank=None, world_size=None, **kw):
        super().__init__()
        if rank is None or world_size is None:
            r, w, source = _rank_and_world()
        else:
            r, w, source = rank, world_size, "explicit"
        self.rank = r if rank is None else rank
        self.world_size = w if world_size is None else world_size
        # Where rank and world size came from; "explicit" when both were given.
        self._rank_source = "explicit" if (rank is not None and world_size is not None) \
            else source
        self._manifest = manifest if isinstance(manifest, fp.Manifest) else fp.load_manifest(manifest)
        self._plan_kw = {k: kw.get(k, v) for k, v in _DEFAULTS.items()}
        fp.check_trainers(self._plan_kw["global_batch"], self.world_size)
        # The plan version (FleetClient's plan_version, slice_partitions,
        # slice_samples; v2's and v3's L defaults to G / world size, and such
        # a state loaded without an explicit slice_samples keeps the saved L).
        self._v2 = kw.get("plan_version", 1) in (2, 3)
        if self._v2 and kw.get("slice_samples") is None:
            kw = dict(kw, slice_samples=self._plan_kw["global_batch"] // self.world_size)
            self._slice_given = False
        else:
            self._slice_given = True
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank: must be in [0, {self.world_size}), got {self.rank}")
        self._args = (targets, dataset)
        self._kw = dict(kw, manifest=self._manifest)
        self._start = (0, 0)
        self._shared_start = None  # FleetDataLoader(persistent_workers=True): read by workers
        self._consumed = None
        self._in_fleet_loader = False  # set in FleetDataLoader's workers
        self.last_errors = []

    def _set_start(self, epoch, batch):
        self._start = (epoch, batch)
        self._consumed = None
        if self._shared_start is not None:
            self._shared_start[0], self._shared_start[1] = epoch, batch

    def set_epoch(self, epoch):
        self._set_start(epoch, 0)

    def state_dict(self):
        e, nb = self._consumed if self._consumed else self._start
        return checkpoint_at(self._manifest, self._plan_kw["seed"], self._plan_kw["block_samples"],
                             self._plan_kw["window"], self._plan_kw["global_batch"],
                             e, nb, **self._plan_version_kw()).to_dict()

    def _plan_version_kw(self):
        if not self._v2:
            return dict(version=self._kw.get("plan_version", 1))
        return dict(version=self._kw["plan_version"],
                    slice_partitions=self._kw.get("slice_partitions", 4),
                    slice_samples=self._kw["slice_samples"])

    def load_state_dict(self, state):
        c = fp.Checkpoint.from_dict(state)
        if self._v2 and not self._slice_given and c.plan_version == self._kw["plan_version"]:
            self._kw["slice_samples"] = c.slice_samples  # the saved L (any T dividing G)
        v = self._plan_version_kw()
        mine = (self._manifest.hash, self._plan_kw["seed"], self._plan_kw["block_samples"],
                self._plan_kw["window"], self._plan_kw["global_batch"],
                self._manifest.num_partitions, v.get("version"), v.get("slice_partitions", 0),
                v.get("slice_samples", 0))
        theirs = (c.manifest_hash, c.seed, c.block_samples, c.window, c.global_batch,
                  c.num_partitions, c.plan_version, c.slice_partitions, c.slice_samples)
        if mine != theirs:
            raise ValueError(f"state: plan {theirs} differs from this dataset's {mine}")
        c.check_position(self._manifest.num_samples)  # past the epoch's end: refused
        self._set_start(c.epoch, c.next_batch)

    def _check_rank(self):
        """Main process: torch.distributed or the environment still name the
        rank this dataset was made with (not the case for a dataset made
        before init_process_group, with neither known: every rank would be
        rank 0 of 1)."""
        if self._rank_source == "explicit" or torch.utils.data.get_worker_info() is not None:
            return
        live = _rank_and_world()
        if live[2] != "default" and live[:2] != (self.rank, self.world_size):
            raise _rank_mismatch("rank", (self.rank, self.world_size, self._rank_source), live)

    def __getstate__(self):
        state = dict(self.__dict__)
        if multiprocessing.context.get_spawning_popen() is None:
            state["_shared_start"] = None  # shareable only with a process being started
        else:
            self._check_rank()
        return state

    def _received(self, epoch, batch, errors):
        """The main process got global batch `batch` of `epoch`."""
        self._consumed = (epoch, batch + 1)
        self.last_errors = errors

    def _items(self, worker, workers):
        if self._shared_start is not None and torch.utils.data.get_worker_info() is not None:
            epoch, start = int(self._shared_start[0]), int(self._shared_start[1])
        else:
            epoch, start = self._start
        with FleetClient(*self._args, trainers=self.world_size, rank=self.rank,
                         **self._kw) as fc:
            for fb in fc.epoch(epoch, start + worker, step=workers):
                yield FleetItem(torch.from_numpy(fb.images.copy()), torch.from_numpy(fb.labels),
                                fb.epoch, fb.batch, fb.errors)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:  # the main process: it consumes what it yields
            self._check_rank()
            for item in self._items(0, 1):
                self._received(item.epoch, item.batch, item.errors)
                yield item.images, item.labels
            return
        _in_worker_exit_hook()  # the worker's exit waits for its queue feeders
        if not self._in_fleet_loader:
            raise RuntimeError(
                "FleetIterableDataset with num_workers > 0: use "
                "nearprep.fleet_torch.FleetDataLoader(ds, num_workers=...) (a plain DataLoader's "
                "workers cannot tell the main process which global batch it consumed, so "
                "state_dict() would be wrong), or num_workers=0")
        yield from self._items(info.id, info.num_workers)


class FleetDataLoader:
    """torch.utils.data.DataLoader(dataset, batch_size=None, ...) over a
    FleetIterableDataset that records, in the main process, each global batch
    it hands over (see the module docstring). Other keywords go to the
    DataLoader (pin_memory, timeout, prefetch_factor, ...)."""

    def __init__(self, dataset, num_workers=0, multiprocessing_context=None,
                 worker_init_fn=None, **kw):
        if not isinstance(dataset, FleetIterableDataset):
            raise TypeError("dataset: must be a FleetIterableDataset")
        for k in ("batch_size", "sampler", "batch_sampler", "collate_fn", "drop_last"):
            if kw.get(k) is not None and not (k == "drop_last" and kw[k] is False):
                raise ValueError(f"{k}: not supported: each item already is one global "
                                 "batch's slice")
        if kw.get("in_order") is False:
            raise ValueError("in_order: must stay True: the items are global batches in order")
        if num_workers < 0:
            raise ValueError(f"num_workers: must be >= 0, got {num_workers}")
        if num_workers > 0 and multiprocessing_context is None:
            multiprocessing_context = "spawn"
        kw.pop("drop_last", None)
        if num_workers > 0 and kw.get("persistent_workers"):
            # Workers that outlive an iteration read the start (set_epoch,
            # load_state_dict) from shared memory when the next one begins.
            ctx = (multiprocessing.get_context(multiprocessing_context)
                   if isinstance(multiprocessing_context, str) else multiprocessing_context)
            if dataset._shared_start is None:
                dataset._shared_start = ctx.Array("q", 2, lock=False)
            dataset._shared_start[0], dataset._shared_start[1] = dataset._start
        self.dataset = dataset
        self.num_workers = num_workers
        self._loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=num_workers,
            multiprocessing_context=multiprocessing_context if num_workers > 0 else None,
            worker_init_fn=(_WorkerInit(worker_init_fn, "_in_fleet_loader")
                            if num_workers > 0 else worker_init_fn),
            **kw)

    def __iter__(self):
        if self.num_workers == 0:
            yield from self._loader  # the dataset records as it yields
            return
        for item in self._loader:
            self.dataset._received(item.epoch, item.batch, item.errors)
            yield item.images, item.labels

    def set_epoch(self, epoch):
        self.dataset.set_epoch(epoch)

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        self.dataset.load_state_dict(state)
