"""PyTorch adapter: nearprep batches as a torch IterableDataset.

    import nearprep.torch

    def main():
        ds = nearprep.torch.IterableDataset("storage-node:7070", "imagenet",
                                            batch_size=64, layout="NCHW",
                                            shuffle=True, seed=1)
        loader = nearprep.torch.DataLoader(ds, num_workers=0)
        for epoch in range(90):
            ds.set_epoch(epoch)
            for images, labels in loader: ...

    if __name__ == "__main__":   # workers (num_workers > 0) are spawned
        main()

The dataset yields whole batches (a plain torch DataLoader needs
batch_size=None). set_epoch reaches the workers, persistent_workers=True
included (shared memory read when a worker's iteration begins). len(ds) is
the rank's batches per epoch.

Ranks (DDP): shard_index / num_shards when given, else torch.distributed's
rank and world size when initialised, else $RANK / $WORLD_SIZE (torchrun),
else 0 / 1 (rank_and_world; errors when the environment names several
processes but not this one's rank). Fixed in the main process the first time
they are needed and shipped to the workers, which never look them up.

Workers: the rank's shard is one stream of T batches; DataLoader worker w of
W serves its consecutive batches [floor(w T / W), floor((w + 1) T / W)),
starting at the shard position where they begin (worker_range). Without
failed samples the workers yield exactly the batches of one process (only
the rank's last batch short), in the DataLoader's round-robin order; under
ERROR_POLICY_SKIP a worker whose range holds failed samples stops where the
next one begins (its last batch short), so no sample is served twice.

Checkpoints: nearprep.torch.DataLoader(ds, num_workers=W, ...) (a DataLoader
whose main process records each batch it hands over) makes ds.state_dict()
exact: per worker stream, the resume token of the last batch the loop
received (bound to its stream: the daemon refuses another stream's).
ds.load_state_dict(state) in a new process yields the batches that were
left, same order, same bytes (with the same W). docs/python.md, "Training
loops (PyTorch)", has a whole DDP script.

uint8 on the wire (4x fewer bytes than float32), finished on the GPU:

    ds = nearprep.torch.IterableDataset(..., dtype="uint8", layout="NHWC")
    for images, labels in loader:
        x = nearprep.torch.finish_uint8(images, mean=(0.485, 0.456, 0.406),
                                        std=(0.229, 0.224, 0.225),
                                        layout="channels_last", device="cuda")

torchvision's ImageNet recipe, bit for bit (FIDELITY_TORCHVISION: the
tensors torchvision 0.14's transforms compute on PIL images, given the crop
box and flip the batch reports), in place of ImageFolder(root, transform=...):

    train = nearprep.torch.imagenet_train("storage-node:7070", "imagenet",
                                          batch_size=256, seed=1, pin_memory=True)
    val = nearprep.torch.imagenet_eval("storage-node:7070", "imagenet-val",
                                       batch_size=256)

Use multiprocessing_context="spawn" (or "forkserver") when the parent process
has used gRPC: gRPC does not survive fork().

Thread-safety: each DataLoader worker owns its own Client and stream.
"""

import os
import warnings
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.utils.data

from nearprep.errors import InvalidArgumentError
from nearprep.plan import shard_batches, shard_size  # noqa: F401 (shard_size: public here too)
from nearprep.request import resume_point, token_fields


def to_torch(array):
    """Zero-copy torch tensor over a numpy array from a Batch (the message
    buffer is owned by this batch only). bfloat16 bits (uint16) become a
    torch.bfloat16 tensor."""
    if array.dtype == np.uint16:  # bfloat16 bits; torch has no uint16
        return to_torch(array.view(np.int16)).view(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only buffer
        return torch.from_numpy(array)


_LAYOUTS_OUT = ("NCHW", "NHWC", "channels_last")


def finish_uint8(images, mean=None, std=None, *, layout="NCHW", input_layout="NHWC",
                 device=None, dtype=torch.float32, non_blocking=True):
    """Finishes a uint8 batch on the trainer's device: to float, x / 255,
    then (x - mean[c]) / std[c] per channel (when given), in `layout`.

    images        uint8 [n, h, w, 3] (input_layout "NHWC", the default) or
                  [n, 3, h, w] ("NCHW"): a numpy array (Batch.images) or a
                  tensor; copied to `device` as uint8 (4x fewer bytes than
                  float32) with `non_blocking`
    mean, std     3 floats each, or None (then only x / 255)
    layout        "NCHW" (contiguous [n, 3, h, w]), "NHWC" (contiguous
                  [n, h, w, 3]) or "channels_last" ([n, 3, h, w] shape in
                  NHWC memory, torch.channels_last: what cuDNN convolutions
                  prefer, and free when the input is NHWC)
    device        torch device (default: the tensor's own, or CPU)
    dtype         torch.float32, float16 or bfloat16 (the half types are
                  computed in float32 and converted in a second pass)

    One elementwise op writes the output: out = x * a[c] + b[c] with
    a = 1 / (255 * std), b = -mean / std (float64, rounded once to float32),
    torch.addcmul(b, x, a, out=out) over the permuted view of x, so the
    layout change costs no separate copy. On CUDA, PyTorch's elementwise
    kernels convert mixed input dtypes inside the kernel, so this is one
    kernel launch reading uint8 (not measured here: this workplace has no
    GPU); on CPU PyTorch first converts the uint8 input to a float
    temporary. It differs from
    ((x / 255) - mean) / std evaluated in float32 by a few float32 ulps;
    tests/python/test_torch_finish.py states the tolerance. Against the
    server's float32 output for the same request, the difference is the
    8-bit quantisation: at most 0.5/255 before normalisation (see
    docs/python.md for the measured error)."""
    if layout not in _LAYOUTS_OUT:
        raise InvalidArgumentError(f"layout: must be one of {_LAYOUTS_OUT}, got {layout!r}",
                                   field="layout")
    if input_layout not in ("NHWC", "NCHW"):
        raise InvalidArgumentError(
            f"input_layout: must be NHWC or NCHW, got {input_layout!r}", field="input_layout")
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise InvalidArgumentError(f"dtype: must be a float dtype, got {dtype}", field="dtype")
    if (mean is None) != (std is None):
        raise InvalidArgumentError("mean: give mean and std together", field="mean")
    x = to_torch(images) if isinstance(images, np.ndarray) else images
    if x.dtype != torch.uint8 or x.dim() != 4:
        raise InvalidArgumentError(
            f"images: must be a 4-D uint8 batch, got {x.dtype} {tuple(x.shape)}", field="images")
    channels = x.shape[3] if input_layout == "NHWC" else x.shape[1]
    mean = np.zeros(channels) if mean is None else np.asarray(mean, np.float64)
    std = np.ones(channels) if std is None else np.asarray(std, np.float64)
    if mean.shape != (channels,) or std.shape != (channels,) or not (std > 0).all():
        raise InvalidArgumentError(
            f"std: mean and std need {channels} values each, std > 0", field="std")
    device = torch.device(device) if device is not None else x.device
    x = x.to(device, non_blocking=non_blocking)
    scale = torch.tensor(1.0 / (255.0 * std), dtype=torch.float32)
    bias = torch.tensor(-mean / std, dtype=torch.float32)
    if layout == "NHWC":
        nhwc = x if input_layout == "NHWC" else x.permute(0, 2, 3, 1)
        out = torch.empty(nhwc.shape, dtype=torch.float32, device=device)
        shape = (1, 1, 1, channels)
        src = nhwc
    else:
        src = x.permute(0, 3, 1, 2) if input_layout == "NHWC" else x
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        out = torch.empty(src.shape, dtype=torch.float32, device=device,
                          memory_format=fmt)
        shape = (1, channels, 1, 1)
    scale = scale.reshape(shape).to(device)
    bias = bias.reshape(shape).to(device)
    torch.addcmul(bias, src, scale, out=out)
    return out if dtype == torch.float32 else out.to(dtype)


# torchvision's classification reference recipe (references/classification):
# ImageNet channel statistics, 224 crops, Resize(256) for evaluation.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _preset_finish(dtype, mean, std):
    if dtype == "uint8":
        # PILToTensor's bytes; normalise on the device (finish_uint8).
        if mean is not None or std is not None:
            raise InvalidArgumentError(
                "mean: uint8 output carries PILToTensor's bytes; pass mean=None, "
                "std=None and normalise with finish_uint8", field="mean")
        return {"dtype": "uint8"}
    out = {"dtype": dtype}
    if mean is not None:
        out["mean"] = tuple(mean)
    if std is not None:
        out["std"] = tuple(std)
    return out


# torchvision's reference (references/classification/train.py) names of its
# --auto-augment policies -> nearprep's Transform.auto_augment.
_AUTO_AUGMENT = {"ta_wide": "trivial_augment_wide", "ra": "rand_augment",
                 "imagenet": "imagenet"}


def imagenet_train_kwargs(size=224, *, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                          flip_probability=0.5, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                          dtype="float32", layout="NCHW", color_jitter=None,
                          auto_augment=None, ra_magnitude=9, ra_num_ops=2,
                          random_erase=0.0, mixup=0.0, cutmix=0.0):
    """Client.batches() keywords of torchvision's training transform
    (references/classification/presets.py, ClassificationPresetTrain):

        T.Compose([T.RandomResizedCrop(size, scale, ratio, BILINEAR, antialias=True),
                   T.RandomHorizontalFlip(flip_probability),
                   T.ColorJitter(*color_jitter),             # when given
                   T.TrivialAugmentWide() / T.RandAugment(ra_num_ops, ra_magnitude) /
                   T.AutoAugment(IMAGENET),                  # auto_augment
                   T.PILToTensor(), T.ConvertImageDtype(torch.float),
                   T.Normalize(mean, std),
                   T.RandomErasing(random_erase)])           # when > 0

    and, per batch, the reference's RandomMixup(alpha=mixup) /
    RandomCutmix(alpha=cutmix) (both: one of them per batch, p = 0.5), on
    default_loader's PIL image. auto_augment takes the reference's names
    ("ta_wide", "ra", "imagenet") or nearprep's. color_jitter is one number
    (brightness = contrast = saturation, hue 0, as ColorJitter(v, v, v)) or
    a 4-tuple (brightness, contrast, saturation, hue). dtype "uint8" (with
    mean=std=None) stops after PILToTensor. Every draw is nearprep's Philox
    (Batch.params with include_params=True; Batch.mix), applied by
    torchvision's algorithm and rounding."""
    h, w = (size, size) if isinstance(size, int) else size
    kw = {"fidelity": "torchvision", "height": h, "width": w, "crop": "random_resized",
          "scale": tuple(scale), "ratio": tuple(ratio),
          "flip_probability": flip_probability, "layout": layout}
    if color_jitter is not None:
        cj = ((color_jitter,) * 3 + (0.0,) if isinstance(color_jitter, (int, float))
              else tuple(color_jitter))
        if len(cj) != 4:
            raise InvalidArgumentError("color_jitter: one number or (brightness, contrast, "
                                       "saturation, hue)", field="color_jitter")
        for name, v in zip(("brightness", "contrast", "saturation", "hue"), cj):
            if v:
                kw["jitter_" + name] = float(v)
    if auto_augment is not None:
        policy = _AUTO_AUGMENT.get(auto_augment, auto_augment)
        if policy not in _AUTO_AUGMENT.values():
            raise InvalidArgumentError(
                f"auto_augment: one of {sorted(_AUTO_AUGMENT)} (torchvision's reference "
                f"names; augmix is not offered), got {auto_augment!r}", field="auto_augment")
        kw["auto_augment"] = policy
        if policy == "rand_augment":
            kw["rand_augment_num_ops"] = int(ra_num_ops)
            kw["rand_augment_magnitude"] = int(ra_magnitude)
    if random_erase:
        kw["erase_probability"] = float(random_erase)
    if mixup:
        kw["mixup_alpha"] = float(mixup)
    if cutmix:
        kw["cutmix_alpha"] = float(cutmix)
    kw.update(_preset_finish(dtype, mean, std))
    return kw


def imagenet_eval_kwargs(size=224, *, resize_size=256, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                         dtype="float32", layout="NCHW"):
    """Client.batches() keywords of torchvision's evaluation transform:

        T.Compose([T.Resize(resize_size, BILINEAR), T.CenterCrop(size),
                   T.PILToTensor(), T.ConvertImageDtype(torch.float),
                   T.Normalize(mean, std)])"""
    h, w = (size, size) if isinstance(size, int) else size
    kw = {"fidelity": "torchvision", "height": h, "width": w, "crop": "resize_center",
          "resize_shorter_side": resize_size, "layout": layout}
    kw.update(_preset_finish(dtype, mean, std))
    return kw


def imagenet_train(target, dataset, batch_size=32, *, size=224, scale=(0.08, 1.0),
                   ratio=(3.0 / 4.0, 4.0 / 3.0), flip_probability=0.5,
                   mean=IMAGENET_MEAN, std=IMAGENET_STD, dtype="float32",
                   shuffle=True, seed=0, pin_memory=False, color_jitter=None,
                   auto_augment=None, ra_magnitude=9, ra_num_ops=2, random_erase=0.0,
                   mixup=0.0, cutmix=0.0, num_classes=None, **kwargs):
    """An IterableDataset of torchvision's ImageNet training preset
    (imagenet_train_kwargs): float32 NCHW [n, 3, size, size] batches and
    int64 labels, shuffled by (seed, epoch);
    call set_epoch() each epoch. pin_memory=True pins each batch (when CUDA
    is available) so .to("cuda", non_blocking=True) overlaps.

    The reference recipe's augmentations: e.g. imagenet_train(target, ds,
    auto_augment="ta_wide", random_erase=0.25, mixup=0.2, cutmix=1.0). With
    mixup or cutmix the labels are the reference's soft targets, float32
    [n, num_classes] (lambda * one_hot(label) + (1 - lambda) *
    one_hot(partner's label)), for CrossEntropyLoss; num_classes defaults to
    the dataset's class count (DatasetInfo). Other keywords go to
    IterableDataset (shard_index, num_shards, epoch, return_batch,
    client_options, drop_remainder, include_params, ...)."""
    kw = imagenet_train_kwargs(size, scale=scale, ratio=ratio,
                               flip_probability=flip_probability, mean=mean, std=std,
                               dtype=dtype, layout=kwargs.pop("layout", "NCHW"),
                               color_jitter=color_jitter, auto_augment=auto_augment,
                               ra_magnitude=ra_magnitude, ra_num_ops=ra_num_ops,
                               random_erase=random_erase, mixup=mixup, cutmix=cutmix)
    if (mixup or cutmix) and num_classes is None:
        from nearprep.client import Client
        c = Client(target, **dict(kwargs.get("client_options") or {}))
        try:
            num_classes = int(c.dataset(dataset).num_classes)
        finally:
            c.close()
    return IterableDataset(target, dataset, batch_size, shuffle=shuffle, seed=seed,
                           pin_memory=pin_memory, num_classes=num_classes, **kw, **kwargs)


def imagenet_eval(target, dataset, batch_size=32, *, size=224, resize_size=256,
                  mean=IMAGENET_MEAN, std=IMAGENET_STD, dtype="float32",
                  pin_memory=False, **kwargs):
    """An IterableDataset of torchvision's ImageNet evaluation preset
    (imagenet_eval_kwargs), in dataset order (no shuffle)."""
    kw = imagenet_eval_kwargs(size, resize_size=resize_size, mean=mean, std=std,
                              dtype=dtype, layout=kwargs.pop("layout", "NCHW"))
    return IterableDataset(target, dataset, batch_size, pin_memory=pin_memory,
                           **kw, **kwargs)


# -- rank and world size ---------------------------------------------------------


def rank_and_world():
    """(rank, world_size, source) of this process, as the main process of a
    trainer sees them: torch.distributed's when it is initialised ("dist"),
    else $RANK / $WORLD_SIZE as torchrun and torch.distributed.launch set
    them ("env"), else 0 / 1 ("default": nothing names a rank).

    Raises InvalidArgumentError when the environment names a world of
    several processes but not this one's rank ($WORLD_SIZE > 1 without
    $RANK: $LOCAL_RANK is the rank within one node, not the global one), a
    $RANK without $WORLD_SIZE other than 0, or values that are not integers
    or out of range: guessing would make ranks read the same samples."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), "dist"
    env = os.environ
    rank, world = env.get("RANK"), env.get("WORLD_SIZE")
    if world is None and rank is None:
        return 0, 1, "default"
    try:
        world_n = int(world) if world is not None else 1
        rank_n = int(rank) if rank is not None else None
    except ValueError:
        raise InvalidArgumentError(
            f"num_shards: $RANK={rank!r} and $WORLD_SIZE={world!r} must be integers",
            field="num_shards") from None
    if world_n < 1:
        raise InvalidArgumentError(f"num_shards: $WORLD_SIZE must be >= 1, got {world_n}",
                                   field="num_shards")
    if rank_n is None:
        if world_n == 1:
            return 0, 1, "env"
        raise InvalidArgumentError(
            f"shard_index: $WORLD_SIZE={world_n} but $RANK is not set, so this process's "
            f"rank is unknown and every rank would read the whole epoch ($LOCAL_RANK="
            f"{env.get('LOCAL_RANK')!r} is the rank within a node). Launch with torchrun, "
            "call torch.distributed.init_process_group first, or pass shard_index= and "
            "num_shards=", field="shard_index")
    if not 0 <= rank_n < world_n:
        raise InvalidArgumentError(
            f"shard_index: $RANK={rank_n} is not in [0, $WORLD_SIZE={world_n})"
            + ("" if world is not None else " ($WORLD_SIZE is not set)"),
            field="shard_index")
    return rank_n, world_n, "env"


def _rank_mismatch(what, fixed, live):
    return RuntimeError(
        f"{what}: this process was fixed as rank {fixed[0]} of {fixed[1]} ({_SOURCES[fixed[2]]}) "
        f"when the dataset was first used, but now {_SOURCES[live[2]]} says rank {live[0]} of "
        f"{live[1]}: the ranks would not read disjoint parts of the epoch. Initialise "
        "torch.distributed (or launch with torchrun) before the dataset is first iterated, "
        "measured with len() or checkpointed, or pass shard_index= and num_shards=")


_SOURCES = {"dist": "torch.distributed", "env": "$RANK / $WORLD_SIZE",
            "default": "neither torch.distributed nor $RANK / $WORLD_SIZE named a rank",
            "explicit": "shard_index / num_shards"}


# -- the split of a rank's batches between DataLoader workers ----------------------


def rank_batches(size, batch_size, drop_remainder=False, max_batches=0):
    """Batches of a rank's stream over a shard of `size` samples when no
    sample fails: ceil(size / batch_size) (floor with drop_remainder), at
    most max_batches (0: no limit)."""
    n = shard_batches(size, batch_size, drop_remainder)
    return min(n, max_batches) if max_batches else n


class WorkerRange(NamedTuple):
    """Worker `worker` of `workers`' part of its rank's stream: batches
    [first_batch, end_batch), shard positions [start_position, end_position)."""
    first_batch: int
    end_batch: int
    start_position: int
    end_position: int


def worker_range(size, batch_size, worker, workers, drop_remainder=False, max_batches=0):
    """The batches of a rank's stream that DataLoader worker `worker` of
    `workers` (0 or 1: the whole stream) serves: of the stream's T batches
    (rank_batches), worker w takes the consecutive batches
    [floor(w T / W), floor((w + 1) T / W)), so the workers' counts differ by
    at most one and only the rank's last batch is short. Its shard positions
    are those batches' positions when no sample fails:
    [first * batch_size, min(end * batch_size, size))."""
    workers = max(1, workers)
    if not 0 <= worker < workers:
        raise InvalidArgumentError(
            f"worker_id: must be in [0, {workers}), got {worker}", field="worker_id")
    t = rank_batches(size, batch_size, drop_remainder, max_batches)
    b0, b1 = worker * t // workers, (worker + 1) * t // workers
    return WorkerRange(b0, b1, b0 * batch_size, min(b1 * batch_size, size))


# Shared-memory layout of IterableDataset._shared: int64 slots (the epoch,
# the state's num_workers, its rotation, the untracked flag) and, in
# IterableDataset._shared_tokens, one NUL-padded slot of _TOKEN_BYTES per
# stream: the start that set_epoch / load_state_dict set in the main process,
# read by every worker when its iteration begins (persistent workers included).
_S_EPOCH, _S_STATE_WORKERS, _S_ROTATION, _S_UNTRACKED, _S_SLOTS = 0, 1, 2, 3, 4
_MAX_STREAMS = 256          # resume tokens it holds: num_workers at most this
_TOKEN_BYTES = 1024
_FRESH = -1                 # _S_STATE_WORKERS: every stream from its start


class _Tagged(NamedTuple):
    """What a worker of nearprep.torch.DataLoader hands the main process:
    the item and where its stream stands after it (the batch's resume token)."""
    item: Any
    stream: int
    epoch: int
    token: str


class IterableDataset(torch.utils.data.IterableDataset):
    """Yields (images, labels) torch tensors, or dicts with sample_ids,
    batch_index and epoch too when return_batch=True.

    Ranks: shard_index / num_shards when given, else the rank and world size
    of torch.distributed (when initialised) or of $RANK / $WORLD_SIZE
    (torchrun), else 0 / 1; fixed in the main process the first time it
    needs them (iterating, starting DataLoader workers, len(), state_dict(),
    load_state_dict()) and shipped to the workers (rank_and_world).

    Workers: DataLoader worker w of W serves the consecutive batches
    [floor(w T / W), floor((w + 1) T / W)) of the rank's T batches
    (worker_range): the same batches, bytes for bytes, as one process
    iterating the rank's shard, only the rank's last batch short (without
    failed samples; docs/python.md), in another order.

    Epochs: set_epoch(e) before each epoch; it reaches DataLoader workers,
    persistent ones included (through shared memory, read when a worker's
    next iteration begins).

    Checkpoints: state_dict() names the epoch and, per worker stream, the
    resume token of the last batch the training loop received;
    load_state_dict(state) makes the next iteration yield exactly the
    batches that were left, in the same order and with the same bytes, in
    this or a new process. Counting what was received needs the main process
    to see each batch: iterate the dataset directly, through a DataLoader
    with num_workers=0, or through nearprep.torch.DataLoader (any
    num_workers). A resumed state needs the num_workers it was taken with.

    len(ds): the rank's batches per epoch (rank_batches over the dataset's
    size from the daemon's listing, the rank's shard, drop_remainder,
    max_batches)."""

    def __init__(self, target, dataset, batch_size=32, *, epoch=0,
                 shard_index=None, num_shards=None, pin_memory=False,
                 return_batch=False, client_options=None, num_classes=None,
                 **batch_kwargs):
        super().__init__()
        if (batch_kwargs.get("mixup_alpha") or batch_kwargs.get("cutmix_alpha")) and (
                not num_classes or num_classes < 1):
            raise InvalidArgumentError(
                "num_classes: MixUp / CutMix yield soft targets [n, num_classes]: give "
                "the number of classes", field="num_classes")
        self.num_classes = num_classes
        for banned in ("epoch", "shard_index", "num_shards"):
            if banned in batch_kwargs:
                raise InvalidArgumentError(f"{banned}: pass it as a keyword of "
                                           "IterableDataset", field=banned)
        for banned in ("start_batch", "start_position", "resume_token"):
            if banned in batch_kwargs:
                raise InvalidArgumentError(
                    f"{banned}: not a keyword of IterableDataset (each worker has its own "
                    "stream): resume with load_state_dict()", field=banned)
        if "sample_ids" in batch_kwargs:
            raise InvalidArgumentError("sample_ids: not a keyword of IterableDataset "
                                       "(nearprep.fleet_torch serves explicit plans)",
                                       field="sample_ids")
        if (shard_index is None) != (num_shards is None):
            raise InvalidArgumentError("shard_index: give shard_index and num_shards "
                                       "together", field="shard_index")
        self.target = target
        self.dataset = dataset
        self.batch_size = batch_size
        self.shard_index = shard_index
        self.num_shards = num_shards
        self.pin_memory = pin_memory
        self.return_batch = return_batch
        self.client_options = dict(client_options or {})
        self.drop_remainder = bool(batch_kwargs.pop("drop_remainder", False))
        self.max_batches = int(batch_kwargs.pop("max_batches", 0) or 0)
        self.batch_kwargs = batch_kwargs
        # Fail now on bad arguments, not inside a worker.
        from nearprep.client import Client
        c = Client(target, **self.client_options)
        try:
            c.request(dataset, batch_size=batch_size, epoch=epoch,
                      shard_index=shard_index or 0, num_shards=num_shards or 1,
                      max_batches=self.max_batches, drop_remainder=self.drop_remainder,
                      **batch_kwargs)
        finally:
            c.close()
        self._rank = None         # (rank, world_size, source), fixed at first use
        if shard_index is not None:
            if not 0 <= shard_index < num_shards:
                raise InvalidArgumentError(
                    f"shard_index: must be in [0, num_shards={num_shards}), got {shard_index}",
                    field="shard_index")
            self._rank = (shard_index, num_shards, "explicit")
        self._num_samples = None  # the daemon's listing, read once
        # Shared with the workers: MAP_SHARED memory, inherited by forked
        # workers and passed to spawned ones while they start.
        import multiprocessing
        self._shared = multiprocessing.RawArray("q", _S_SLOTS)
        self._shared_tokens = multiprocessing.RawArray("c", _MAX_STREAMS * _TOKEN_BYTES)
        self._tagged = False      # set in nearprep.torch.DataLoader's workers
        self._consumed = None     # what the main process received (a state)
        self._set_start(epoch, None, 0, None)

    # -- rank, size ---------------------------------------------------------------

    def _rank_shard(self):
        """(shard_index, num_shards) of this rank. Fixed the first time the
        main process asks; later main-process calls check that the live
        values still agree (a dataset first used before init_process_group
        and again after it; not after destroy_process_group). A worker uses the main process's values (shipped
        when spawned, inherited when forked)."""
        in_worker = torch.utils.data.get_worker_info() is not None
        if self._rank is None:
            self._rank = rank_and_world()
        elif self._rank[2] != "explicit" and not in_worker:
            live = rank_and_world()
            # A process group destroyed at the end (live: "default") is fine.
            if live[2] != "default" and live[:2] != self._rank[:2]:
                raise _rank_mismatch("shard_index", self._rank, live)
        return self._rank[0], self._rank[1]

    @property
    def rank(self):
        """(shard_index, num_shards, source) this rank serves (source: "explicit",
        "dist", "env" or "default"); fixes them if not yet fixed."""
        self._rank_shard()
        return self._rank

    def _size(self, client=None):
        """Samples in this rank's shard (the dataset's size from the daemon)."""
        if self._num_samples is None:
            from nearprep.client import Client
            c = client or Client(self.target, **self.client_options)
            try:
                self._num_samples = int(c.dataset(self.dataset).num_samples)
            finally:
                if client is None:
                    c.close()
        shard, shards = self._rank_shard()
        return shard_size(self._num_samples, shard, shards)

    def __len__(self):
        """Batches this rank yields per epoch (all workers together): exact
        unless samples fail to decode under error_policy="skip" (then there
        may be fewer, never more: a worker's range with failed samples ends
        in a short batch, left out with drop_remainder)."""
        try:
            size = self._size()
        except Exception as e:  # noqa: BLE001 (torch expects TypeError for "no length")
            raise TypeError(f"len(): the dataset's size is unknown ({e})") from e
        return rank_batches(size, self.batch_size, self.drop_remainder, self.max_batches)

    # -- the start: epoch, per-stream tokens ----------------------------------------

    def _set_start(self, epoch, workers, rotation, tokens):
        """workers None: every stream from the start of `epoch`; else the
        num_workers (0: the main process) `tokens` (per stream: the resume
        token of its last batch received, or None) were taken with, stream
        `rotation` coming next."""
        self.epoch = epoch
        self._start = (epoch, workers, rotation, tokens)
        self._consumed = None
        sh = self._shared
        if sh is not None:
            sh[_S_EPOCH] = epoch
            sh[_S_ROTATION] = rotation
            sh[_S_UNTRACKED] = 0
            if tokens is not None:
                for k, t in enumerate(tokens):
                    raw = (t or "").encode()
                    if len(raw) >= _TOKEN_BYTES:
                        raise InvalidArgumentError(
                            f"tokens: a resume token of {len(raw)} bytes (at most "
                            f"{_TOKEN_BYTES - 1})", field="tokens")
                    self._shared_tokens[k * _TOKEN_BYTES:(k + 1) * _TOKEN_BYTES] = \
                        raw.ljust(_TOKEN_BYTES, b"\0")
            sh[_S_STATE_WORKERS] = _FRESH if workers is None else workers

    def _read_start(self):
        """The start as the process iterating sees it (a worker: the shared
        memory, which the main process may have changed since it started)."""
        sh = self._shared
        if sh is None or torch.utils.data.get_worker_info() is None:
            return self._start
        workers = int(sh[_S_STATE_WORKERS])
        tokens = None
        if workers != _FRESH:
            tokens = []
            for k in range(max(1, workers)):
                raw = bytes(self._shared_tokens[k * _TOKEN_BYTES:(k + 1) * _TOKEN_BYTES])
                tokens.append(raw.rstrip(b"\0").decode() or None)
        return (int(sh[_S_EPOCH]), None if workers == _FRESH else workers,
                int(sh[_S_ROTATION]), tokens)

    def set_epoch(self, epoch):
        """The next iteration serves `epoch` from its start (every worker,
        persistent ones included)."""
        self._set_start(int(epoch), None, 0, None)

    def state_dict(self):
        """{"epoch", "num_workers", "rotation", "tokens", "dataset",
        "batch_size", "shard"}: where the training loop stands (see the
        class docstring); JSON-serialisable. "tokens": None at an epoch's
        start, else per worker stream the resume token of the last batch
        the loop received from it (None: none yet)."""
        if self._shared is not None and self._shared[_S_UNTRACKED]:
            raise RuntimeError(
                "state_dict: this dataset was iterated by the workers of a plain "
                "torch DataLoader, whose main process cannot tell which batches the "
                "loop received; use nearprep.torch.DataLoader(ds, num_workers=...) or "
                "num_workers=0")
        epoch, workers, rotation, tokens = self._consumed or self._start
        return {"epoch": epoch, "num_workers": workers, "rotation": rotation,
                "tokens": None if tokens is None else list(tokens),
                "dataset": self.dataset, "batch_size": self.batch_size,
                "shard": list(self._rank_shard())}

    def load_state_dict(self, state):
        """Resumes at `state` (from state_dict(), possibly of another
        process): the next iteration yields the batches that were left."""
        want = {"dataset": self.dataset, "batch_size": self.batch_size,
                "shard": list(self._rank_shard())}
        for k, v in want.items():
            if k in state and state[k] != v:
                raise InvalidArgumentError(
                    f"state: {k} {state[k]!r} differs from this dataset's {v!r}", field=k)
        epoch = int(state["epoch"])
        if state.get("positions") is not None:
            raise InvalidArgumentError(
                "positions: a state of an older nearprep.torch (raw positions of another "
                "worker split, not resume tokens): it cannot resume mid-epoch; restart "
                f"epoch {epoch} with set_epoch({epoch})", field="positions")
        workers, tokens = state.get("num_workers"), state.get("tokens")
        if workers is None or tokens is None:
            self._set_start(epoch, None, 0, None)
            return
        workers = int(workers)
        if workers < 0 or len(tokens) != max(1, workers) or workers > _MAX_STREAMS:
            raise InvalidArgumentError(
                f"tokens: {len(tokens)} resume tokens for num_workers={workers}",
                field="tokens")
        shard, shards = self._rank_shard()
        for t in tokens:
            if t is None:
                continue
            f = token_fields(t)
            # The daemon checks every field when the stream resumes; these
            # two fail here, in the main process, with a plain message.
            for k, v in (("epoch", str(epoch)), ("shard", f"{shard}/{shards}")):
                if k in f and f[k] != v:
                    raise InvalidArgumentError(
                        f"tokens: a resume token of {k} {f[k]}, this state/rank's is {v}",
                        field="tokens")
        self._set_start(epoch, workers, int(state.get("rotation", 0)),
                        [None if t is None else str(t) for t in tokens])

    def __getstate__(self):
        import multiprocessing.context
        state = dict(self.__dict__)
        if multiprocessing.context.get_spawning_popen() is None:
            state["_shared"] = None  # shareable only with a process being started
            state["_shared_tokens"] = None
        elif torch.utils.data.get_worker_info() is None:
            # Pickled for a process being started (a DataLoader worker): the
            # rank is fixed here, in the main process, where it is known.
            self._rank_shard()
            state["_rank"] = self._rank
        return state

    # -- recording (main process) -------------------------------------------------

    def _received(self, epoch, workers, stream, token):
        """The main process got a batch of `stream` whose resume token is
        `token`; the next stream in turn comes after it."""
        c = self._consumed
        if c is None or c[0] != epoch or c[1] != workers:
            s_epoch, s_workers, s_rot, s_tokens = self._start
            tokens = (list(s_tokens) if s_tokens is not None and s_workers == workers
                      else [None] * max(1, workers))
            c = (epoch, workers, 0, tokens)
        tokens = c[3]
        tokens[stream] = token
        self._consumed = (epoch, workers, (stream + 1) % max(1, workers), tokens)

    def _finished(self, epoch):
        """The loop received the whole epoch: a state taken now starts the next."""
        self._consumed = (epoch + 1, None, 0, None)

    # -- iteration ------------------------------------------------------------------

    def __iter__(self):
        from nearprep.client import Client
        info = torch.utils.data.get_worker_info()
        workers = 0 if info is None else info.num_workers
        epoch, state_workers, rotation, tokens = self._read_start()
        if state_workers is not None and state_workers != workers:
            raise InvalidArgumentError(
                f"num_workers: the loaded state was taken with num_workers={state_workers}, "
                f"this iteration has {workers}; each worker serves its own batches, so "
                "resume with the same num_workers", field="num_workers")
        stream_id = 0 if info is None else (info.id + rotation) % workers
        if info is not None:
            _in_worker_exit_hook()
        if info is not None and not self._tagged and self._shared is not None:
            self._shared[_S_UNTRACKED] = 1
        shard, shards = self._rank_shard()
        client = Client(self.target, **self.client_options)
        stream = None
        try:
            rng = worker_range(self._size(client), self.batch_size, stream_id, workers,
                               self.drop_remainder, self.max_batches)
            token = None if tokens is None else tokens[stream_id]
            if token:
                start_batch, start_position = resume_point(token)
            else:
                start_batch, start_position = rng.first_batch, rng.start_position
            left = rng.end_batch - start_batch
            if left <= 0 or start_position >= rng.end_position:
                if info is None:
                    self._finished(epoch)
                return
            where = ({"resume_token": token} if token else
                     {"start_batch": start_batch, "start_position": start_position})
            pin = self.pin_memory and torch.cuda.is_available()
            stream = client.batches(self.dataset, batch_size=self.batch_size, epoch=epoch,
                                    shard_index=shard, num_shards=shards, max_batches=left,
                                    **where, **self.batch_kwargs)
            for batch in stream:
                n = len(batch.labels)
                if batch.next_position > rng.end_position:
                    # Samples failed in this range (ERROR_POLICY_SKIP): the batch
                    # runs into the next worker's range; keep what precedes it.
                    n = self._samples_before(client, epoch, shard, shards, batch,
                                             rng.end_position)
                if n > 0 and not (self.drop_remainder and n < self.batch_size):
                    item = self._item(batch, n, pin)
                    if info is None:
                        self._received(epoch, 0, 0, batch.resume_token)
                        yield item
                    elif self._tagged:
                        yield _Tagged(item, stream_id, epoch, batch.resume_token)
                    else:
                        yield item
                if batch.next_position >= rng.end_position:
                    break
            if info is None:
                self._finished(epoch)
        finally:
            if stream is not None:
                stream.close()
            client.close()

    def _samples_before(self, client, epoch, shard, shards, batch, end):
        """How many of `batch`'s samples lie before shard position `end`: the
        first sample at or after `end` that decodes (one-sample stream from
        there) is where the next range begins."""
        probe = client.batches(self.dataset, batch_size=1, epoch=epoch, shard_index=shard,
                               num_shards=shards, start_batch=end, start_position=end,
                               max_batches=1, **self.batch_kwargs)
        try:
            first = next(iter(probe), None)
        finally:
            probe.close()
        ids = batch.sample_ids.tolist()
        if first is None or int(first.sample_ids[0]) not in ids:
            return len(ids)
        return ids.index(int(first.sample_ids[0]))

    def _item(self, batch, n, pin):
        whole = n == len(batch.labels)
        images = to_torch(batch.images if whole else batch.images[:n])
        labels = to_torch(batch.labels if whole else batch.labels[:n])
        mix = batch.header.mix if self.num_classes else None
        if mix is not None and mix.kind:
            labels = mixed_targets(labels, to_torch(np.array(batch.header.mix_labels[:n],
                                                             dtype=np.int64)),
                                   getattr(mix, "lambda"), self.num_classes)
        if pin:
            images, labels = images.pin_memory(), labels.pin_memory()
        if not self.return_batch:
            return images, labels
        return {"images": images, "labels": labels,
                "sample_ids": to_torch(batch.sample_ids[:n].astype(np.int64)),
                "batch_index": batch.index, "epoch": batch.epoch}


def mixed_targets(labels, partner_labels, lam, num_classes):
    """torchvision's reference soft targets of a MixUp / CutMix batch, in
    float32: lam * one_hot(labels) + (1 - lam) * one_hot(partner_labels)
    (its RandomMixup: target.mul_(lam).add_(rolled.mul_(1.0 - lam)))."""
    target = torch.nn.functional.one_hot(labels, num_classes).to(torch.float32)
    rolled = torch.nn.functional.one_hot(partner_labels, num_classes).to(torch.float32)
    rolled.mul_(1.0 - lam)
    return target.mul_(lam).add_(rolled)


_FEEDER_JOIN_S = 5.0
_feeder_hook = False


def _join_queue_feeders():
    """At a DataLoader worker's exit (threading's exit hooks run after the
    worker loop closed its data queue): waits, at most _FEEDER_JOIN_S in
    all, for multiprocessing's queue feeder threads to finish sending the
    batches they hold. torch cancels the join of that daemon thread, so a
    worker stopped mid-epoch could finalise while the feeder was inside
    torch's tensor sharing with the GIL released; taking it back then killed
    the thread through a C++ frame: "terminate called without an active
    exception", the worker killed by SIGABRT, and in the main process
    "DataLoader worker (pid N) is killed by signal: Aborted" from the
    iterator's __del__ (the pytest warning)."""
    import threading
    import time
    deadline = time.monotonic() + _FEEDER_JOIN_S
    for t in threading.enumerate():
        if t.name == "QueueFeederThread" and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))


def _in_worker_exit_hook():
    global _feeder_hook
    if not _feeder_hook:
        _feeder_hook = True
        from nearprep.client import _at_exit
        _at_exit(_join_queue_feeders)


class _WorkerInit:
    """worker_init_fn of nearprep's loaders (DataLoader here, FleetDataLoader
    in nearprep.fleet_torch; picklable: spawned workers unpickle it): sets
    the attribute `mark` of the worker's copy of the dataset to True (the
    worker knows it runs under that loader), then runs the caller's."""

    def __init__(self, user_init, mark="_tagged"):
        self.user_init = user_init
        self.mark = mark

    def __call__(self, worker_id):
        setattr(torch.utils.data.get_worker_info().dataset, self.mark, True)
        if self.user_init is not None:
            self.user_init(worker_id)


class DataLoader:
    """torch.utils.data.DataLoader(dataset, batch_size=None, ...) over a
    nearprep.torch.IterableDataset that records, in the main process, each
    batch it hands over, so dataset.state_dict() names the batches after the
    last one the loop received, never one a worker merely prefetched.
    Workers start with multiprocessing_context="spawn" unless told
    otherwise (gRPC does not survive fork() in a process that used it).
    Other keywords go to the DataLoader (pin_memory, persistent_workers,
    prefetch_factor, timeout, ...)."""

    def __init__(self, dataset, num_workers=0, multiprocessing_context=None,
                 worker_init_fn=None, **kw):
        if not isinstance(dataset, IterableDataset):
            raise InvalidArgumentError("dataset: must be a nearprep.torch.IterableDataset",
                                       field="dataset")
        for k in ("batch_size", "sampler", "batch_sampler", "collate_fn"):
            if kw.get(k) is not None:
                raise InvalidArgumentError(f"{k}: not supported: each item already is a batch",
                                           field=k)
        if not isinstance(num_workers, int) or num_workers < 0:
            raise InvalidArgumentError(f"num_workers: must be an integer >= 0, got "
                                       f"{num_workers!r}", field="num_workers")
        if num_workers > _MAX_STREAMS:
            raise InvalidArgumentError(f"num_workers: at most {_MAX_STREAMS}",
                                       field="num_workers")
        if num_workers > 0 and multiprocessing_context is None:
            multiprocessing_context = "spawn"
        self.dataset = dataset
        self.num_workers = num_workers
        self._loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=num_workers,
            multiprocessing_context=multiprocessing_context if num_workers > 0 else None,
            worker_init_fn=_WorkerInit(worker_init_fn) if num_workers > 0 else worker_init_fn,
            **kw)

    def __iter__(self):
        ds = self.dataset
        ds._rank_shard()  # fixed (or checked) here, before workers start
        _, state_workers, _, _ = ds._start
        if state_workers is not None and state_workers != self.num_workers:
            raise InvalidArgumentError(
                f"num_workers: the loaded state was taken with num_workers={state_workers}, "
                f"this loader has {self.num_workers}; resume with the same num_workers",
                field="num_workers")
        if self.num_workers == 0:
            yield from self._loader  # the dataset records as it yields
            return
        epoch = None
        for t in self._loader:
            epoch = t.epoch
            ds._received(t.epoch, self.num_workers, t.stream, t.token)
            yield t.item
        ds._finished(ds._start[0] if epoch is None else epoch)

    def __len__(self):
        return len(self.dataset)

    def set_epoch(self, epoch):
        self.dataset.set_epoch(epoch)

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        self.dataset.load_state_dict(state)
