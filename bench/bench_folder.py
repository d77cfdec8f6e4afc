"""Folder datasets benchmark (``make bench``): what it costs to read the user's own images.

1. Staging throughput of ``--dataset folder:PATH``: JPEGs of 500 × 375 px (a typical photo
   size) decoded, resized and centre-cropped to 224 px with a timm model's preprocessing, by
   the tracer's stager with 0, 1 and all decode workers (images per second).
2. ``--corruptions``: the time one 224-px image takes for each of the 15 ImageNet-C
   corruptions (median over a few images, one thread), so a user can tell how long staging a
   corrupted episode takes. Staging runs between timed events, never inside one, so this is
   wall time of the run, not time in any trace row.

Prints a markdown table with the machine (CPU model, cores, library versions). On a shared
machine every figure is an upper bound on the time: other processes only ever add time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import PIL
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tempora_trace.data import get_dataset  # noqa: E402
from tempora_trace.data.streams import CORRUPTIONS, Episode, batch_order  # noqa: E402
from tempora_trace.preprocess import Preprocess  # noqa: E402
from tempora_trace.staging import BatchStager  # noqa: E402


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_photos(root: Path, classes: int, per_class: int) -> None:
    rng = np.random.default_rng(0)
    for k in range(classes):
        folder = root / f"class{k:02d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            # smooth content (JPEG-typical), not noise: upsampled low-resolution colour field
            small = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
            Image.fromarray(small).resize((500, 375), Image.BILINEAR).save(folder / f"{i:04d}.jpg", quality=90)


def staging_rate(root: Path, workers: int, batches: int, batch_size: int, pre: Preprocess) -> float:
    spec = get_dataset(f"folder:{root}").bind(pre, 0)
    domain = spec.open(spec.domains[0], None, None)
    order = batch_order(len(domain.source), batch_size, 0, domain.name, batches)
    episode = Episode(domain.name, [domain], [order])
    with BatchStager(workers) as stager:
        stager.stage(episode, [0])  # warm: thread start, first-decode caches
        t0 = time.perf_counter()
        stager.stage(episode, range(len(order)))
        seconds = time.perf_counter() - t0
    return len(order) * batch_size / seconds


def corruption_costs(root: Path, pre: Preprocess, severity: int, images: int) -> dict[str, float]:
    out = {}
    for name in CORRUPTIONS:
        spec = get_dataset(f"folder:{root}", corruptions=[name]).bind(pre, 0)
        source = spec.open(name, severity, None).source
        source.get_batch([0])  # first call: imports, frost textures, numba compilation
        times = []
        for i in range(1, images + 1):
            t0 = time.perf_counter()
            source.get_batch([i])
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--images", type=int, default=3, help="images per corruption")
    parser.add_argument("--severity", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import timm  # optional stack: the preprocessing of a timm model

    # timm's mobilenetv3_small_100 preprocessing: 224 px, resize 256 (crop 0.875), bicubic
    cfg = timm.models.get_pretrained_cfg("mobilenetv3_small_100")
    pre = Preprocess(224, int(224 / cfg.crop_pct), cfg.interpolation, tuple(cfg.mean), tuple(cfg.std))
    cores = os.cpu_count() or 1
    print(
        f"machine: {cpu_name()}, {cores} cores; torch {torch.__version__}, Pillow {PIL.__version__}, "
        f"numpy {np.__version__}, Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "photos"
        write_photos(root, classes=4, per_class=(args.batches * args.batch_size) // 4 + 1)
        print(f"\n1. staging {args.batches} batches of {args.batch_size} JPEGs (500x375 -> 224 px, {pre.interpolation})\n")
        print("| decode workers | images/s |\n|---|---|")
        for workers in sorted({0, 1, min(8, cores)}):
            print(f"| {workers} | {staging_rate(root, workers, args.batches, args.batch_size, pre):.0f} |")
        print(f"\n2. one 224-px image per corruption, severity {args.severity} (median of {args.images}, one thread)\n")
        print("| corruption | ms per image |\n|---|---|")
        for name, seconds in corruption_costs(root, pre, args.severity, args.images).items():
            print(f"| {name} | {1000 * seconds:.0f} |")


if __name__ == "__main__":
    main()
