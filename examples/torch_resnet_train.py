#!/usr/bin/python3
"""A short ResNet training loop fed by nearprep.torch.

    python3 examples/torch_resnet_train.py --target HOST:PORT --dataset NAME \
        [--val-dataset NAME] [--epochs 2] [--workers 2] [--size 112] [--steps 20]

By default the batches are torchvision's ImageNet recipe, bit for bit
(nearprep.torch.imagenet_train / imagenet_eval, FIDELITY_TORCHVISION): what

    ImageFolder(root, T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(),
                                 T.PILToTensor(), T.ConvertImageDtype(torch.float),
                                 T.Normalize(mean, std)]))

computes for the crop boxes and flips nearprep draws, and for evaluation
Resize(size * 256 / 224), CenterCrop(size). --recipe tf uses TensorFlow's
numbers instead (random resized crop, flip, brightness, saturation, ImageNet
normalisation; FIDELITY_TF_COMPAT). The daemon sends NCHW float32 batches;
the trainer only moves them to the device.
Each DataLoader worker streams its own disjoint part of the shard; under
torchrun / DistributedDataParallel every rank gets shard rank / world_size
automatically (torch.distributed initialised before the dataset iterates).
At the end the client-side stall statistics show how long the loop waited
for data versus computed.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "client", "python"))
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import nearprep  # noqa: E402
import nearprep.torch  # noqa: E402


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                    nn.BatchNorm2d(cout))
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.short(x))


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2016): 4 stages of 2 basic blocks."""

    def __init__(self, num_classes, width=64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for i, cout in enumerate([width, width * 2, width * 4, width * 8]):
            layers += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="localhost:7070")
    ap.add_argument("--dataset", default="imagenet-sample")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="stop each epoch after N steps")
    ap.add_argument("--val-dataset", default="", help="evaluate on this dataset each epoch")
    ap.add_argument("--recipe", choices=["torchvision", "tf"], default="torchvision")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 batches (--recipe tf)")
    ap.add_argument("--width", type=int, default=16, help="ResNet base width (64: standard)")
    # torchvision's classification reference flags (references/classification/train.py).
    ap.add_argument("--auto-augment", default=None, help="ta_wide, ra or imagenet")
    ap.add_argument("--ra-magnitude", type=int, default=9)
    ap.add_argument("--random-erase", type=float, default=0.0)
    ap.add_argument("--mixup-alpha", type=float, default=0.0)
    ap.add_argument("--cutmix-alpha", type=float, default=0.0)
    ap.add_argument("--label-smoothing", type=float, default=0.0)
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    num_classes = nearprep.Client(args.target).dataset(args.dataset).num_classes
    pin = device.type == "cuda"
    if args.recipe == "torchvision":
        ds = nearprep.torch.imagenet_train(args.target, args.dataset,
                                           batch_size=args.batch_size, size=args.size,
                                           seed=42, pin_memory=pin,
                                           auto_augment=args.auto_augment,
                                           ra_magnitude=args.ra_magnitude,
                                           random_erase=args.random_erase,
                                           mixup=args.mixup_alpha, cutmix=args.cutmix_alpha,
                                           num_classes=num_classes)
    else:
        ds = nearprep.torch.IterableDataset(
            args.target, args.dataset, batch_size=args.batch_size, shuffle=True, seed=42,
            height=args.size, width=args.size, layout="NCHW",
            dtype="bfloat16" if args.bf16 else "float32",
            crop="random_resized", flip_probability=0.5,
            brightness_max_delta=32.0 / 255.0, saturation=(0.5, 1.5),
            mean=nearprep.torch.IMAGENET_MEAN, std=nearprep.torch.IMAGENET_STD,
            pin_memory=pin)
    val = None
    if args.val_dataset:
        # torchvision's recipe: resize 256 for 224 crops, in proportion.
        val = nearprep.torch.imagenet_eval(args.target, args.val_dataset,
                                           batch_size=args.batch_size, size=args.size,
                                           resize_size=args.size * 256 // 224,
                                           pin_memory=pin)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=args.workers,
        multiprocessing_context="spawn" if args.workers else None,
        persistent_workers=False)
    model = ResNet18(num_classes, args.width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        model.train()
        t0 = time.monotonic()
        wait = 0.0
        seen = 0
        mark = time.monotonic()
        for step, (images, labels) in enumerate(loader):
            wait += time.monotonic() - mark
            images = images.to(device, non_blocking=True).float()
            labels = labels.to(device, non_blocking=True)
            # Soft targets [n, classes] with MixUp / CutMix, else labels.
            loss = F.cross_entropy(model(images), labels,
                                   label_smoothing=args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += len(labels)
            if step % 5 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.3f}")
            if args.steps and step + 1 >= args.steps:
                break
            mark = time.monotonic()
        secs = time.monotonic() - t0
        print(f"epoch {epoch}: {seen} images in {secs:.1f} s ({seen / secs:.1f} images/s), "
              f"waited for data {wait:.1f} s ({100 * wait / secs:.0f}% stall)")
        if val is not None:
            model.eval()
            correct = total = 0
            with torch.no_grad():
                for images, labels in val:
                    images = images.to(device, non_blocking=True).float()
                    pred = model(images).argmax(1).cpu()
                    correct += int((pred == labels).sum())
                    total += len(labels)
            print(f"epoch {epoch}: top-1 {100 * correct / max(total, 1):.1f}% "
                  f"on {total} validation images")


if __name__ == "__main__":
    main()
