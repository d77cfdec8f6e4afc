"""The built-in demo benchmark: a procedurally drawn 10-class 32x32 shape set and its 15
ImageNet-C corruptions at severities 1-5, in exactly the CIFAR-10-C on-disk layout.

Why it exists: every CI run and every new user needs a TTA benchmark that costs no download
and still behaves like CIFAR-10-C (a source model that is good on clean data, clearly worse
on corrupted data, with BatchNorm statistics that the shift moves). So:

* **classes are shapes**, not colours: disk, ring, square, square frame, triangle, star,
  cross, bar, striped disk, checkered disk. Position, scale, rotation, the foreground and
  background colours, a smooth background colour field, small clutter dots and pixel noise
  are drawn independently of the class, and shape sizes are set so all classes cover about
  the same area, so per-channel colour statistics carry (almost) no label information;
* **deterministic bit-for-bit**: image ``i`` of a split is drawn from its own
  ``numpy.random.Generator`` seeded with ``(DEMO_SEED, split, i)``; corruption of image ``i``
  at ``(c, s)`` seeds numpy's global RNG (which ``imagecorruptions`` reads) from
  ``(DEMO_SEED, c, s, i)``. Chunks can go to any number of processes with the same result;
* **lazy**: the clean splits are made on first use; a corruption's ``.npy`` is created
  full-size (sparse) on first use and only the requested severity slice is filled. Finished
  slices are listed in a JSON sidecar, written atomically after the data are flushed, under
  an exclusive lock file, so concurrent callers and crashes never expose half a slice.

Cache: ``$TEMPORA_HOME/demo/<DEMO_VERSION>/`` (``TEMPORA_HOME`` defaults to the user cache
folder, ``~/.cache/tempora`` on Linux: see :mod:`tempora_trace.paths`). Bump ``DEMO_VERSION``
whenever generation changes so stale data are never read. ``TEMPORA_DEMO_TEST_SIZE`` (tests only) shrinks the test split; reduced sets
live in their own directory (``<DEMO_VERSION>-n<size>``), and image ``i`` is identical in
every size.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np
from filelock import FileLock
from numpy.lib.format import open_memmap

from tempora_schema import CORRUPTIONS
from tempora_schema.errors import OutputError, describe_os_error
from tempora_toolkit.atomic_files import to_bytes, write_file

from ..errors import DataError
from ..paths import tempora_home

#: Bump on any change to drawing or corruption so old caches are never read.
DEMO_VERSION = "v2"
DEMO_SEED = 20260311
IMAGE_SIZE = 32
CLASS_NAMES: tuple[str, ...] = (
    "disk",
    "ring",
    "square",
    "frame",
    "triangle",
    "star",
    "cross",
    "bar",
    "stripes",
    "checker",
)
NUM_CLASSES = len(CLASS_NAMES)
DEMO_TEST_SIZE = 10_000
DEMO_TRAIN_SIZE = 50_000
SEVERITIES = (1, 2, 3, 4, 5)
#: the 15 ImageNet-C corruptions in imagecorruptions' canonical order (tempora_schema.CORRUPTIONS).
DEMO_CORRUPTIONS: tuple[str, ...] = CORRUPTIONS
_SPLIT_CODES = {"train": 0, "test": 1}
_SUPERSAMPLE = 2  # shapes are rendered at 2x and box-filtered: anti-aliased edges
# Size of each shape relative to the sampled scale, chosen so that the expected covered area
# is about the same for every class (colour statistics then do not reveal the class).
_SHAPE_SCALE = {
    "disk": 0.80,
    "ring": 0.98,
    "square": 0.76,
    "frame": 0.95,
    "triangle": 1.10,
    "star": 1.00,
    "cross": 1.05,
    "bar": 1.15,
    "stripes": 0.80,
    "checker": 0.80,
}


# ----------------------------------------------------------------------------- locations
def demo_test_size() -> int:
    """Test-split size: ``DEMO_TEST_SIZE`` unless ``TEMPORA_DEMO_TEST_SIZE`` (tests) says less."""
    raw = os.environ.get("TEMPORA_DEMO_TEST_SIZE")
    if not raw:
        return DEMO_TEST_SIZE
    try:
        size = int(raw)
    except ValueError:
        raise ValueError(f"TEMPORA_DEMO_TEST_SIZE must be a positive integer, got {raw!r}") from None
    if size <= 0:
        raise ValueError(f"TEMPORA_DEMO_TEST_SIZE must be a positive integer, got {raw!r}")
    return size


def demo_dir(home: str | os.PathLike | None = None) -> Path:
    """``$TEMPORA_HOME/demo/<version>[-n<size>]``: everything generated for this test size."""
    size = demo_test_size()
    name = DEMO_VERSION if size == DEMO_TEST_SIZE else f"{DEMO_VERSION}-n{size}"
    return tempora_home(home) / "demo" / name


def corrupted_dir(home: str | os.PathLike | None = None) -> Path:
    """The CIFAR-10-C-layout directory (``labels.npy`` + one ``<corruption>.npy`` each)."""
    return demo_dir(home) / "DEMO-C"


# ----------------------------------------------------------------------------- drawing
def _labels(split: str, n: int) -> np.ndarray:
    """Balanced labels in shuffled order: each block of 10 indices is a permutation of 0..9.

    Seeded per block, so the first ``k`` labels are the same whatever ``n`` is.
    """
    code = _SPLIT_CODES[split]
    blocks = (n + NUM_CLASSES - 1) // NUM_CLASSES
    out = np.empty(blocks * NUM_CLASSES, dtype=np.int64)
    for b in range(blocks):
        out[b * NUM_CLASSES : (b + 1) * NUM_CLASSES] = np.random.default_rng([DEMO_SEED, code, 1, b]).permutation(NUM_CLASSES)
    return out[:n]


_S = IMAGE_SIZE * _SUPERSAMPLE
_GRID = (np.arange(_S, dtype=np.float64) + 0.5) / _SUPERSAMPLE  # pixel-unit sample positions
_GX, _GY = np.meshgrid(_GRID, _GRID)


def _shape_mask(name: str, px: np.ndarray, py: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """Boolean coverage of the shape in object coordinates (unit size), and for the textured
    classes a second boolean mask selecting the pattern's other colour."""
    r = np.hypot(px, py)
    ax, ay = np.abs(px), np.abs(py)
    if name == "disk":
        return r <= 1.0, None
    if name == "ring":
        return (r <= 1.0) & (r >= 0.58), None
    if name == "square":
        return np.maximum(ax, ay) <= 0.9, None
    if name == "frame":
        m = np.maximum(ax, ay)
        return (m <= 0.9) & (m >= 0.55), None
    if name == "triangle":
        inside = np.ones_like(px, dtype=bool)
        for k in range(3):
            a = np.pi / 2 + 2 * np.pi * k / 3
            inside &= (px * np.cos(a) + py * np.sin(a)) <= 0.5
        return inside, None
    if name == "star":
        phi = np.arctan2(py, px)
        # five sharp points: radius between 0.42 (valleys) and 1.0 (tips)
        return r <= 0.42 + 0.58 * ((1 + np.cos(5 * phi)) / 2) ** 2, None
    if name == "cross":
        return ((ax <= 0.3) & (ay <= 0.95)) | ((ay <= 0.3) & (ax <= 0.95)), None
    if name == "bar":
        return (ax <= 1.0) & (ay <= 0.3), None
    if name == "stripes":
        period = rng.uniform(0.45, 0.6)
        return r <= 1.0, np.sin(2 * np.pi * px / period) > 0
    if name == "checker":
        period = rng.uniform(0.55, 0.75)
        return r <= 1.0, (np.sin(2 * np.pi * px / period) * np.sin(2 * np.pi * py / period)) > 0
    raise KeyError(name)


def _random_colour(rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0.0, 1.0, size=3)


def _distinct_colour(rng: np.random.Generator, other: np.ndarray, min_dist: float = 0.6) -> np.ndarray:
    """A uniform colour at least ``min_dist`` (RGB Euclidean) from ``other`` (rejection)."""
    while True:
        c = _random_colour(rng)
        if np.linalg.norm(c - other) >= min_dist:
            return c


def _smooth_field(rng: np.random.Generator, amplitude: float) -> np.ndarray:
    """A low-frequency RGB field (4x4 control points, bilinear) with the given amplitude."""
    ctrl = rng.normal(0.0, amplitude, size=(4, 4, 3))
    t = np.linspace(0, 3, IMAGE_SIZE)
    i0 = np.minimum(np.floor(t).astype(int), 2)
    f = (t - i0)[:, None]
    rows = ctrl[i0] * (1 - f[:, :, None]) + ctrl[i0 + 1] * f[:, :, None]  # (32, 4, 3)
    cols = rows[:, i0] * (1 - f.T[:, :, None]) + rows[:, i0 + 1] * f.T[:, :, None]
    return cols


def _box_down(a: np.ndarray) -> np.ndarray:
    """Average ``_SUPERSAMPLE x _SUPERSAMPLE`` blocks: supersampled mask -> pixel coverage."""
    s = _SUPERSAMPLE
    return a.reshape(IMAGE_SIZE, s, IMAGE_SIZE, s).mean(axis=(1, 3))


def render_image(split: str, index: int, label: int) -> np.ndarray:
    """Draw image ``index`` of ``split`` (class ``label``) as uint8 32x32x3, deterministically."""
    rng = np.random.default_rng([DEMO_SEED, _SPLIT_CODES[split], 0, index])
    name = CLASS_NAMES[label]
    bg = _random_colour(rng)
    fg = _distinct_colour(rng, bg)
    img = np.broadcast_to(bg, (IMAGE_SIZE, IMAGE_SIZE, 3)) + _smooth_field(rng, rng.uniform(0.03, 0.12))

    # clutter: a few small dots in random colours, drawn before the object (may be occluded)
    for _ in range(rng.integers(0, 4)):
        cx, cy = rng.uniform(0, IMAGE_SIZE, size=2)
        rad = rng.uniform(0.8, 1.8)
        cover = _box_down(((_GX - cx) ** 2 + (_GY - cy) ** 2 <= rad**2).astype(np.float64))[..., None]
        img = img * (1 - cover) + _random_colour(rng) * cover

    scale = rng.uniform(8.0, 12.5) * _SHAPE_SCALE[name]
    theta = rng.uniform(0, 2 * np.pi)
    centre = IMAGE_SIZE / 2 + rng.uniform(-4.0, 4.0, size=2)
    cos, sin = np.cos(theta), np.sin(theta)
    dx, dy = _GX - centre[0], _GY - centre[1]
    px = (cos * dx + sin * dy) / scale
    py = (-sin * dx + cos * dy) / scale
    inside, pattern = _shape_mask(name, px, py, rng)
    if pattern is None:
        cover = _box_down(inside.astype(np.float64))[..., None]
        obj = np.broadcast_to(fg, img.shape)
    else:
        fg2 = _distinct_colour(rng, fg)
        cover = _box_down(inside.astype(np.float64))[..., None]
        share = _box_down((inside & pattern).astype(np.float64))[..., None]
        with np.errstate(invalid="ignore", divide="ignore"):
            w = np.where(cover > 0, share / np.maximum(cover, 1e-12), 0.0)
        obj = fg * w + fg2 * (1 - w)
    shading = 1.0 + rng.uniform(-0.15, 0.15) * (px / 2)[::_SUPERSAMPLE, ::_SUPERSAMPLE, None]
    img = img * (1 - cover) + obj * shading * cover
    img = img + rng.normal(0.0, rng.uniform(0.0, 0.06), size=img.shape)
    return np.clip(np.round(img * 255.0), 0, 255).astype(np.uint8)


def _render_chunk(args: tuple[str, int, np.ndarray]) -> np.ndarray:
    split, start, labels = args
    out = np.empty((len(labels), IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    for k, label in enumerate(labels):
        out[k] = render_image(split, start + k, int(label))
    return out


def _corrupt_chunk(args: tuple[str, int, int, np.ndarray]) -> np.ndarray:
    # optional stack (imagecorruptions, scikit-image): loaded only when images are corrupted on the fly
    from tempora_trace.data._corruptions_compat import corrupt

    corruption, severity, start, images = args
    code = DEMO_CORRUPTIONS.index(corruption)
    out = np.empty_like(images)
    for k in range(len(images)):
        seed = np.random.SeedSequence([DEMO_SEED, code, severity, start + k]).generate_state(1)[0]
        np.random.seed(int(seed))
        out[k] = corrupt(images[k], corruption, severity)
    return out


def _default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _map_chunks(func, tasks: list, workers: int | None) -> list[np.ndarray]:
    """Run chunk tasks in order, in ``workers`` processes (results never depend on it)."""
    workers = _default_workers() if workers is None else workers
    if workers <= 1 or len(tasks) <= 1:
        return [func(t) for t in tasks]
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    with multiprocessing.get_context(method).Pool(workers) as pool:
        return pool.map(func, tasks, chunksize=1)


def generate_clean(split: str, n: int, workers: int | None = None, chunk: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels of the first ``n`` indices of ``split`` (no caching)."""
    if split not in _SPLIT_CODES:
        raise ValueError(f"unknown demo split {split!r}: expected 'train' or 'test'")
    labels = _labels(split, n)
    tasks = [(split, s, labels[s : s + chunk]) for s in range(0, n, chunk)]
    images = np.concatenate(_map_chunks(_render_chunk, tasks, workers)) if n else np.empty((0, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    return images, labels


def corrupt_images(images: np.ndarray, corruption: str, severity: int, workers: int | None = None, chunk: int = 500) -> np.ndarray:
    """Corrupt clean test images (index ``i`` seeded by ``(corruption, severity, i)``)."""
    _check_corruption(corruption, severity)
    tasks = [(corruption, severity, s, images[s : s + chunk]) for s in range(0, len(images), chunk)]
    return np.concatenate(_map_chunks(_corrupt_chunk, tasks, workers))


# ----------------------------------------------------------------------------- cache
def _locked(path: Path) -> FileLock:
    """Exclusive lock on ``path`` (created if needed), held across processes for a ``with``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(path)


def _atomic_save(path: Path, array: np.ndarray) -> None:
    write_file(path, to_bytes(lambda fh: np.save(fh, array)))


def _atomic_write_json(path: Path, obj) -> None:
    write_file(path, json.dumps(obj).encode("utf-8"))


def _cache_errors(fn):
    """A cache that cannot be written (read-only or full TEMPORA_HOME) is one line that says
    where and what to do, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OSError as exc:
            raise DataError(
                describe_os_error(exc, action="cannot write the demo data cache at") + "; or set TEMPORA_HOME to a writable folder"
            ) from None
        except OutputError as exc:
            raise DataError(f"demo data cache: {exc}; or set TEMPORA_HOME to a writable folder") from None

    return wrapper


def _check_corruption(corruption: str, severity: int) -> None:
    if corruption not in DEMO_CORRUPTIONS:
        raise ValueError(f"unknown corruption {corruption!r}: expected one of {', '.join(DEMO_CORRUPTIONS)}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be an integer 1..5, got {severity!r}")


@_cache_errors
def ensure_demo_clean(
    home: str | os.PathLike | None = None, split: str = "test", workers: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The clean ``split`` (``"test"`` or ``"train"``): uint8 Nx32x32x3 images, int64 labels.

    Generated on first use into the cache (both files written atomically), loaded after.
    """
    if split not in _SPLIT_CODES:
        raise ValueError(f"unknown demo split {split!r}: expected 'train' or 'test'")
    root = demo_dir(home) / "clean"
    img_path, lab_path = root / f"{split}_images.npy", root / f"{split}_labels.npy"
    if not (img_path.exists() and lab_path.exists()):
        with _locked(root / f"{split}.lock"):
            if not (img_path.exists() and lab_path.exists()):
                n = demo_test_size() if split == "test" else DEMO_TRAIN_SIZE
                images, labels = generate_clean(split, n, workers)
                _atomic_save(lab_path, labels)
                _atomic_save(img_path, images)
    return np.load(img_path), np.load(lab_path)


def _done_path(directory: Path, corruption: str) -> Path:
    return directory / f".{corruption}.done.json"


def completed_severities(corruption: str, home: str | os.PathLike | None = None) -> list[int]:
    """Severities of ``corruption`` already generated in the cache."""
    path = _done_path(corrupted_dir(home), corruption)
    if not path.exists():
        return []
    return sorted(json.loads(path.read_text())["severities"])


@_cache_errors
def ensure_demo_corrupted(corruption: str, severity: int, home: str | os.PathLike | None = None, workers: int | None = None) -> Path:
    """Directory in CIFAR-10-C layout whose ``<corruption>.npy`` has ``severity`` filled.

    ``labels.npy`` has length 5*N and ``<corruption>.npy`` shape (5*N, 32, 32, 3) uint8, where
    rows ``(s-1)*N : s*N`` are severity ``s``. Only the requested slice is generated (rows of
    severities not yet asked for are zeros; ``completed_severities`` lists the valid ones).
    """
    _check_corruption(corruption, severity)
    directory = corrupted_dir(home)
    if severity in completed_severities(corruption, home):
        return directory
    images, labels = ensure_demo_clean(home, "test", workers)
    n = len(labels)
    directory.mkdir(parents=True, exist_ok=True)
    lab_path = directory / "labels.npy"
    if not lab_path.exists():
        with _locked(directory / ".labels.lock"):
            if not lab_path.exists():
                _atomic_save(lab_path, np.tile(labels, len(SEVERITIES)))
    with _locked(directory / f".{corruption}.lock"):
        done = completed_severities(corruption, home)
        if severity in done:
            return directory
        data_path = directory / f"{corruption}.npy"
        shape = (len(SEVERITIES) * n, IMAGE_SIZE, IMAGE_SIZE, 3)
        if data_path.exists():
            data = np.load(data_path, mmap_mode="r+")
            if data.shape != shape or data.dtype != np.uint8:
                raise ValueError(f"{data_path}: unexpected shape {data.shape}; delete {directory} to regenerate")
        else:
            tmp = directory / f".{corruption}.npy.tmp"
            data = open_memmap(tmp, mode="w+", dtype=np.uint8, shape=shape)
            data.flush()
            os.replace(tmp, data_path)
        data[(severity - 1) * n : severity * n] = corrupt_images(images, corruption, severity, workers)
        data.flush()
        del data
        _atomic_write_json(_done_path(directory, corruption), {"severities": sorted(set(done) | {severity}), "n": n})
    return directory
