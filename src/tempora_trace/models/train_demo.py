"""Train the demo models (``demo-resnet``: BatchNorm, ``demo-resnet-gn``: GroupNorm) on the
clean training split of the demo set, deterministically on CPU, and write their state_dicts.

    python -m tempora_trace.models.train_demo --out src/tempora_trace/models/weights

Both models get the same recipe: SGD with Nesterov momentum, one-cycle learning rate (linear
warm-up, cosine decay), weight decay, random-crop (reflect padding) + horizontal-flip
augmentation and nothing else (no corruption augmentation: the corrupted sets must stay an
unseen shift, as CIFAR-10-C is for CIFAR-10 models). Seeds, data order, augmentation draws and
the thread count are fixed and ``torch.use_deterministic_algorithms(True)`` is on, so a rerun
on the same machine and library versions reproduces the weights bit-for-bit.

At the end it prints clean test accuracy and, with ``--eval-severity`` (default 5), the
accuracy on each of the 15 corruptions at that severity (generating them if needed).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tempora_trace.data.demo import DEMO_CORRUPTIONS, NUM_CLASSES, ensure_demo_clean, ensure_demo_corrupted
from tempora_trace.models.demo import build_demo_resnet

#: file name of each model's weights, by norm.
WEIGHT_FILES = {"bn": "demo-resnet.pt", "gn": "demo-resnet-gn.pt"}
TRAIN_SEED = 0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _augment(batch: np.ndarray, rng: np.random.Generator, pad: int) -> torch.Tensor:
    """Random crop after reflect padding, and random horizontal flip; uint8 NHWC -> float NCHW."""
    n, h, w, _ = batch.shape
    padded = np.pad(batch, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
    offsets = rng.integers(0, 2 * pad + 1, size=(n, 2))
    flips = rng.random(n) < 0.5
    out = np.empty_like(batch)
    for k in range(n):
        crop = padded[k, offsets[k, 0] : offsets[k, 0] + h, offsets[k, 1] : offsets[k, 1] + w]
        out[k] = crop[:, ::-1] if flips[k] else crop
    return to_tensor(out)


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 NHWC -> float32 NCHW in [0, 1] (the models' input convention)."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)


@torch.no_grad()
def evaluate(model: torch.nn.Module, images: np.ndarray, labels: np.ndarray, batch_size: int = 500) -> float:
    """Top-1 accuracy of ``model`` in eval mode (BN on running statistics)."""
    model.eval()
    correct = 0
    for start in range(0, len(images), batch_size):
        logits = model(to_tensor(images[start : start + batch_size]))
        correct += int((logits.argmax(1) == torch.from_numpy(labels[start : start + batch_size])).sum())
    return correct / len(images)


def train_one(
    norm: str, images: np.ndarray, labels: np.ndarray, epochs: int, batch_size: int, lr: float, weight_decay: float, pad: int, log=print
) -> tuple[torch.nn.Module, dict]:
    """Train one demo model from a fixed seed; returns the model and timing info."""
    torch.manual_seed(TRAIN_SEED)
    rng = np.random.default_rng([TRAIN_SEED, 0 if norm == "bn" else 1])
    model = build_demo_resnet(norm=norm, num_classes=NUM_CLASSES)
    decay, no_decay = [], []
    for p in model.parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr, momentum=0.9, nesterov=True
    )
    steps_per_epoch = len(images) // batch_size
    total = epochs * steps_per_epoch
    warmup = max(1, int(0.15 * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, total - warmup)))
    )
    t0, c0 = time.perf_counter(), _cpu_seconds()
    step = 0
    for epoch in range(epochs):
        model.train()
        order = rng.permutation(len(images))
        running = 0.0
        for b in range(steps_per_epoch):
            idx = np.sort(order[b * batch_size : (b + 1) * batch_size])
            x = _augment(images[idx], rng, pad)
            y = torch.from_numpy(labels[idx])
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            running += loss.item()
            step += 1
        log(
            f"[{norm}] epoch {epoch + 1}/{epochs} loss {running / steps_per_epoch:.4f} "
            f"wall {time.perf_counter() - t0:.0f}s cpu {_cpu_seconds() - c0:.0f}s"
        )
    info = {"train_wall_s": time.perf_counter() - t0, "train_cpu_s": _cpu_seconds() - c0, "steps": total}
    model.eval()
    return model, info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tempora_trace.models.train_demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for demo-resnet.pt / demo-resnet-gn.pt")
    parser.add_argument("--norm", choices=["bn", "gn", "both"], default="both")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--train-size", type=int, default=None, help="use the first N training images (default: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.08)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--pad", type=int, default=3, help="random-crop padding in pixels")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (fixed for reproducibility)")
    parser.add_argument(
        "--eval-severity",
        type=int,
        default=5,
        choices=[0, 1, 2, 3, 4, 5],
        help="also report accuracy on all 15 corruptions at this severity (0: skip)",
    )
    parser.add_argument("--home", type=Path, default=None, help="cache root (default $TEMPORA_HOME or ~/.cache/tempora)")
    parser.add_argument("--summary", type=Path, default=None, help="write accuracies and timings as JSON here")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)

    t = time.perf_counter()
    train_x, train_y = ensure_demo_clean(args.home, "train")
    test_x, test_y = ensure_demo_clean(args.home, "test")
    print(f"data ready in {time.perf_counter() - t:.1f}s: train {len(train_x)}, test {len(test_x)}")
    if args.train_size is not None:
        train_x, train_y = train_x[: args.train_size], train_y[: args.train_size]

    corrupted = {}
    if args.eval_severity:
        n = len(test_y)
        s = args.eval_severity
        for name in DEMO_CORRUPTIONS:
            t = time.perf_counter()
            directory = ensure_demo_corrupted(name, s, args.home)
            corrupted[name] = np.load(directory / f"{name}.npy", mmap_mode="r")[(s - 1) * n : s * n]
            print(f"  {name} severity {s} ready in {time.perf_counter() - t:.1f}s")

    summary = {}
    norms = ["bn", "gn"] if args.norm == "both" else [args.norm]
    for norm in norms:
        model, info = train_one(norm, train_x, train_y, args.epochs, args.batch_size, args.lr, args.weight_decay, args.pad)
        path = args.out / WEIGHT_FILES[norm]
        torch.save(model.state_dict(), path)
        info["clean_acc"] = evaluate(model, test_x, test_y)
        info["params"] = sum(p.numel() for p in model.parameters())
        info["file_bytes"] = path.stat().st_size
        print(
            f"[{norm}] wrote {path} ({info['file_bytes'] / 1e6:.2f} MB, {info['params']} params); "
            f"train wall {info['train_wall_s']:.0f}s cpu {info['train_cpu_s']:.0f}s; clean acc {info['clean_acc']:.4f}"
        )
        for name, imgs in corrupted.items():
            info[f"{name}@{args.eval_severity}"] = evaluate(model, np.asarray(imgs), test_y)
            print(f"[{norm}]   {name:18s} severity {args.eval_severity}: {info[f'{name}@{args.eval_severity}']:.4f}")
        summary[norm] = info
        sys.stdout.flush()
    if args.summary:
        args.summary.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
