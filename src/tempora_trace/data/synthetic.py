"""A synthetic JPEG folder in the ImageNet-C layout, for timing a device without the dataset.

Timing does not depend on image content, labels or weights, so a folder of random JPEGs read
through the real ImageNet-C path (decode workers, staging, the model at 224 px) times a method
as the real data would; traces of it (with ``--weights random``) are timing-only, their
accuracies mean nothing. Images are smooth noise plus grain saved at JPEG quality 85, so
decoding one costs about what decoding a photograph of the same size costs.

Each ``<root>/<domain>/<severity>/`` gets 1000 class folders (images spread round-robin) and a
marker file, so a complete folder is reused, an interrupted one is rewritten, and a folder that
was not written here (real ImageNet-C, say) is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from ..errors import ConfigError, DataError
from ..progress import ProgressView
from .streams import CORRUPTIONS, expand_domains

MARKER = ".tempora-synthetic.json"
CLASSES = 1000
CHUNK = 128  # images per worker task
QUALITY = 85


def wnid(k: int) -> str:
    """Class folder name; sorted order gives label k, as ImageNet's wnids do."""
    return f"n{k:08d}"


def _draw_chunk(folder: str, start: int, stop: int, size: int, seed: Sequence[int]) -> int:
    """Write images ``start..stop-1`` of one domain folder; each chunk has its own seed, so the
    folder's content does not depend on how many workers wrote it."""
    rng = np.random.default_rng([*seed, start])
    cell = 8
    for i in range(start, stop):
        coarse = rng.integers(0, 256, (-(-size // cell), -(-size // cell), 3), dtype=np.uint8)
        img = np.kron(coarse, np.ones((cell, cell, 1), dtype=np.uint8))[:size, :size]
        img = np.clip(img.astype(np.int16) + rng.integers(-12, 13, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(Path(folder) / wnid(i % CLASSES) / f"img_{i:07d}.JPEG", quality=QUALITY)
    return stop - start


def _marker(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _prepare(folder: Path, params: dict) -> bool:
    """True when ``folder`` must be written (after clearing an earlier synthetic folder);
    False when it already holds exactly these images."""
    found = _marker(folder)
    if found is not None:
        if found == {**params, "complete": True}:
            return False
        shutil.rmtree(folder)  # ours, but interrupted or drawn with other parameters
    elif folder.exists() and any(folder.iterdir()):
        raise DataError(f"{folder} exists and was not written by `tempora-trace synthesize`; choose another folder")
    for k in range(CLASSES):
        (folder / wnid(k)).mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text(json.dumps({**params, "complete": False}))
    return True


def write_imagenet_c_folder(
    root: str | os.PathLike,
    domains: Sequence[str],
    images: int,
    severity: int = 5,
    size: int = 224,
    seed: int = 0,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[str]:
    """Write ``images`` synthetic JPEGs per domain under ``root`` (ImageNet-C layout); returns
    the domains that were (re)written. ``progress(n)`` is called as images are written."""
    if images < 1 or size < 8 or not 1 <= severity <= 5:
        raise ConfigError("synthetic data needs at least 1 image per domain, images of 8 px or more, and a severity in 1..5")
    root = Path(root)
    written = []
    workers = max(1, workers or os.cpu_count() or 1)
    report = progress or (lambda n: None)
    for domain in domains:
        folder = root / domain / str(severity)
        params = {"images": images, "size": size, "seed": seed, "quality": QUALITY}
        # content seeded by the domain's name: the same whichever other domains are written with it
        key = (seed, zlib.crc32(domain.encode()))
        chunks = [(str(folder), a, min(a + CHUNK, images), size, key) for a in range(0, images, CHUNK)]
        try:
            if not _prepare(folder, params):
                report(images)
                continue
            parallel = workers > 1 and len(chunks) > 1
            with ProcessPoolExecutor(max_workers=min(workers, len(chunks))) if parallel else contextlib.nullcontext() as pool:
                for n in (pool.map if parallel else map)(_draw_chunk, *zip(*chunks)):
                    report(n)
            (folder / MARKER).write_text(json.dumps({**params, "complete": True}))
        except OSError as exc:  # a full disk, a folder removed under us: the marker stays incomplete
            raise DataError(f"cannot write {folder}: {exc.strerror or exc}") from None
        written.append(domain)
    return written


def synthesize(
    root: str | os.PathLike,
    domains: Sequence[str],
    images: int,
    severity: int = 5,
    size: int = 224,
    seed: int = 0,
    workers: int | None = None,
    quiet: bool = False,
) -> str:
    """``tempora-trace synthesize``: expand ``domains`` (corruptions or groups), write them under
    ``root`` with a progress bar (none when ``quiet``), and say in one line what was written
    and what reused."""
    names = expand_domains(list(domains), CORRUPTIONS)
    bar = ProgressView(enabled=not quiet)
    bar.start("synthesize", total=images * len(names))
    try:
        written = write_imagenet_c_folder(root, names, images, severity, size, seed, workers, progress=bar.advance)
    finally:
        bar.close()
    reused = [d for d in names if d not in written]
    return f"{root}: {images} synthetic {size}-px JPEGs per domain, severity {severity}: wrote {', '.join(written) or 'nothing'}" + (
        f"; reused {', '.join(reused)}" if reused else ""
    )
