"""The user's own images: ``--dataset folder:PATH``.

Layouts (found from the tree):

* ``PATH/<domain>/<class>/<image>``: each domain folder is one domain (an episode of an
  episodic stream, like a corruption of ImageNet-C);
* ``PATH/<class>/<image>``: one domain, named after the folder.

A class's index is the position of its folder name in sorted order (across all domains), as
torchvision's ``ImageFolder`` numbers them. ``--class-map FILE`` (CSV lines ``folder,index``)
maps the folders onto a model's own classes instead, for example ImageNet WordNet IDs onto the
1000 logits of a pretrained model; predictions are then scored over the mapped classes only
(as ImageNet-R and -A are). ``--corruptions LIST`` on a one-domain folder applies the 15
ImageNet-C corruptions (the reference ``imagecorruptions`` functions, through
:mod:`._corruptions_compat`) at ``--severity`` on the fly: one domain per corruption, image
``i`` corrupted with numpy's RNG seeded from ``(seed, corruption, severity, i)``, so every
decode of it is identical.

Images are decoded, resized and centre-cropped the way the model's library says (its
:class:`~tempora_trace.preprocess.Preprocess`), by the tracer's staging threads between timed
events, never inside one. The dataset's name in the trace identity is ``folder:<name>@<hash>``:
the folder's name and a hash of what it holds (every image's relative path and size, the class
map), so traces of the same images taken on two machines share a group and traces of
different images never do.
"""

from __future__ import annotations

import csv
import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from ..errors import ConfigError, DataError
from .streams import CORRUPTION_GROUPS, CORRUPTIONS

PREFIX = "folder:"
#: the reference corruption functions take images of at least this side
MIN_CORRUPTION_SIZE = 32
#: what counts as an image (torchvision's ImageFolder extensions)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def is_folder_spec(name: str) -> bool:
    return name.startswith(PREFIX)


@dataclass(frozen=True)
class FolderScan:
    """What a folder holds: domains, classes and each domain's images with their labels."""

    root: Path
    nested: bool
    domains: tuple[str, ...]
    classes: tuple[str, ...]
    files: dict[str, tuple[Path, ...]]
    targets: dict[str, np.ndarray]  # class index (sorted folder order) of every file
    fingerprint: str


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _subdirs(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        raise DataError(f"cannot read {folder}: {exc.strerror or exc}") from None


def scan_folder(root: Path) -> FolderScan:
    """Read the layout of ``root`` (see the module doc); DataError when it is not one."""
    if not root.exists():
        raise DataError(f"--dataset folder:{root}: no such folder")
    if not root.is_dir():
        raise DataError(f"--dataset folder:{root}: not a folder")
    top = _subdirs(root)
    if not top:
        raise DataError(f"--dataset folder:{root} holds no class folders (layout: PATH/<class>/<image> or PATH/<domain>/<class>/<image>)")
    nested = any(_subdirs(d) for d in top)
    groups = {d.name: _subdirs(d) for d in top} if nested else {root.name: top}
    classes = tuple(sorted({c.name for dirs in groups.values() for c in dirs}))
    index = {c: i for i, c in enumerate(classes)}
    files: dict[str, tuple[Path, ...]] = {}
    targets: dict[str, np.ndarray] = {}
    digest = hashlib.sha256()
    for domain, dirs in groups.items():
        found: list[Path] = []
        labels: list[int] = []
        for c in dirs:
            imgs = _images(c)
            found += imgs
            labels += [index[c.name]] * len(imgs)
        if not found:
            where = root / domain if nested else root
            raise DataError(
                f"--dataset folder:{root}: {where} holds no images (expected <class>/<image> files: {', '.join(IMAGE_SUFFIXES)})"
            )
        files[domain] = tuple(found)
        targets[domain] = np.asarray(labels, dtype=np.int64)
        for p in found:
            digest.update(f"{p.relative_to(root)}\0{p.stat().st_size}\n".encode("utf-8", "surrogateescape"))
    return FolderScan(root, nested, tuple(groups), classes, files, targets, digest.hexdigest())


def read_class_map(path: Path, classes: Sequence[str]) -> dict[str, int]:
    """``folder,index`` lines (a ``folder,index`` header and ``#`` comments allowed); every
    class folder must be mapped."""
    if not path.is_file():
        raise DataError(f"--class-map {path}: no such file")
    mapping: dict[str, int] = {}
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            for lineno, row in enumerate(csv.reader(fh), 1):
                if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                    continue
                if len(row) != 2:
                    raise DataError(f"--class-map {path}:{lineno}: expected 'folder,index', got {','.join(row)!r}")
                folder, text = row[0].strip(), row[1].strip()
                if lineno == 1 and not text.lstrip("-").isdigit():
                    continue  # a header line
                try:
                    value = int(text)
                except ValueError:
                    raise DataError(f"--class-map {path}:{lineno}: index {text!r} is not a whole number") from None
                if value < 0:
                    raise DataError(f"--class-map {path}:{lineno}: index {value} is negative")
                if folder in mapping and mapping[folder] != value:
                    raise DataError(f"--class-map {path}:{lineno}: folder {folder!r} is mapped twice")
                mapping[folder] = value
    except UnicodeDecodeError:
        raise DataError(f"--class-map {path}: not a UTF-8 text file") from None
    missing = [c for c in classes if c not in mapping]
    if missing:
        raise DataError(
            f"--class-map {path} does not map the class folder {missing[0]!r}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    return {c: mapping[c] for c in classes}


def expand_corruptions(text: str | Sequence[str]) -> tuple[str, ...]:
    """``--corruptions`` as corruption names (groups noise/blur/weather/digital/all expanded,
    ``clean`` for the images as they are), order kept, no repeats."""
    words = [w.strip() for part in ([text] if isinstance(text, str) else text) for w in str(part).split(",") if w.strip()]
    out: list[str] = []
    for word in words:
        for name in CORRUPTION_GROUPS.get(word, [word]):
            if name not in CORRUPTIONS and name != "clean":
                raise ConfigError(
                    f"--corruptions: unknown corruption '{name}'; available: {', '.join(CORRUPTIONS)}, clean (or groups noise, blur, weather, digital, all)"
                )
            if name not in out:
                out.append(name)
    if not out:
        raise ConfigError("--corruptions: no corruption given")
    return tuple(out)


# ------------------------------------------------------------------------ decoding
#: imagecorruptions draws from numpy's global RNG: one corruption at a time across threads.
_CORRUPT_LOCK = threading.Lock()


class FolderSource:
    """A domain of a folder as a :class:`~tempora_trace.data.streams.BatchSource`: decode,
    resize and crop (the model's preprocessing), optionally corrupt, scale to [0, 1]."""

    def __init__(
        self,
        files: Sequence[Path],
        labels: np.ndarray,
        preprocess,
        corruption: str | None = None,
        severity: int | None = None,
        seed: int = 0,
    ):
        self.files = list(files)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.preprocess = preprocess
        self._resize_crop = preprocess.transform().transforms[:-1]
        self.corruption = corruption
        self.severity = severity
        self.seed = seed

    def __len__(self) -> int:
        return len(self.files)

    def _image(self, i: int) -> torch.Tensor:
        path = self.files[i]
        try:
            with Image.open(path) as img:
                img = img.convert("RGB")
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
            raise DataError(f"cannot decode image {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from None
        for step in self._resize_crop:
            img = step(img)
        array = np.array(img, dtype=np.uint8)  # a writable copy
        if self.corruption is not None:
            try:
                array = self._corrupt(array, i)
            except Exception as exc:  # the reference functions refuse e.g. images under 32 px
                raise DataError(f"cannot apply {self.corruption} to {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from None
        return torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1).float().div_(255.0)

    def _corrupt(self, array: np.ndarray, i: int) -> np.ndarray:
        # optional stack (imagecorruptions, scikit-image): loaded only when images are corrupted on the fly
        from ._corruptions_compat import corrupt

        code = CORRUPTIONS.index(self.corruption)
        seed = np.random.SeedSequence([int(self.seed), code, int(self.severity), int(i)]).generate_state(1)[0]
        with _CORRUPT_LOCK:
            saved = np.random.get_state()  # the run's own numpy stream is left as it was
            try:
                np.random.seed(int(seed))
                out = corrupt(array, self.corruption, int(self.severity))
            finally:
                np.random.set_state(saved)
        return np.clip(np.asarray(out), 0, 255).astype(np.uint8)

    def get_batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.stack([self._image(int(i)) for i in indices])
        return x, torch.as_tensor(self.labels[np.asarray(indices, dtype=np.int64)], dtype=torch.int64)

    def check_readable(self, indices: Sequence[int], workers: int = 4) -> None:
        """Open the header of each image in ``indices`` (cheap), so a file that is not an
        image is refused before the run writes anything."""

        def check(i: int) -> None:
            path = self.files[int(i)]
            try:
                with Image.open(path) as img:
                    img.size  # noqa: B018 - the header is parsed on open
            except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
                raise DataError(f"cannot decode image {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from None

        unique = sorted(set(int(i) for i in indices))
        if workers <= 1 or len(unique) < 64:
            for i in unique:
                check(i)
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for _ in pool.map(check, unique):
                pass
