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
the folder's name and a hash of what it holds (every image's relative path and the SHA-256 of
its bytes, the class map), so traces of the same images taken on two machines share a group
and traces of different images never do, whatever their names and sizes. Hashing reads every
image once per process (and again only where a file changed).
"""

from __future__ import annotations

import csv
import errno
import hashlib
import os
import threading
import warnings
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
    """The image files of a class folder; a link among them that dangles or loops is one line
    (skipping it would shrink the dataset without a word)."""
    found = []
    for p in sorted(folder.iterdir()):
        if p.suffix.lower() not in IMAGE_SUFFIXES:
            continue
        if p.is_file():
            found.append(p)
        elif p.is_symlink():
            try:
                p.resolve(strict=True)
                what = "does not point to a file"
            except RuntimeError:
                what = "is part of a symbolic-link loop"
            except OSError as exc:
                what = "is part of a symbolic-link loop" if exc.errno == errno.ELOOP else "is a dangling symbolic link"
            raise DataError(f"image {p} {what}; remove it or point it at an image")
    return found


#: (device, inode, size, mtime, ctime) of a file → the SHA-256 of its bytes, for this process:
#: a folder opened again is hashed again only where a file changed
_CONTENT: dict[tuple, str] = {}


def _content_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _CONTENT.get(key)
    if known is None:
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        except OSError as exc:
            raise DataError(f"cannot read image {path}: {exc.strerror or exc}") from None
        known = _CONTENT[key] = digest.hexdigest()
    return known


def content_fingerprint(root: Path, files: Sequence[Path], workers: int = 8) -> str:
    """SHA-256 over every file's relative path and the SHA-256 of its bytes (read once per
    process and change; threads, as hashing releases the interpreter lock)."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        hashes = list(pool.map(_content_sha256, files, chunksize=64))
    digest = hashlib.sha256()
    for p, sha in zip(files, hashes):
        digest.update(f"{p.relative_to(root)}\0{sha}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def tree_stamp(root: Path) -> int:
    """A cheap stamp of a folder's files (paths, sizes, times): a dataset cached in this
    process is scanned again when it changes."""
    items = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        if len(Path(dirpath).relative_to(root).parts) >= 2:
            dirnames[:] = []  # images sit at most two folders deep (a link loop is not followed for ever)
        dirnames.sort()
        for name in sorted(filenames):
            try:
                st = os.stat(os.path.join(dirpath, name))
            except OSError:
                items.append((dirpath, name))
                continue
            items.append((dirpath, name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return hash(tuple(items))


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
    for domain in groups:  # a domain's name is written into the trace (UTF-8 text)
        try:
            domain.encode("utf-8")
        except UnicodeEncodeError:
            shown = domain.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise DataError(f"--dataset folder:{root}: the domain folder name '{shown}' is not valid UTF-8; rename it") from None
    classes = tuple(sorted({c.name for dirs in groups.values() for c in dirs}))
    index = {c: i for i, c in enumerate(classes)}
    files: dict[str, tuple[Path, ...]] = {}
    targets: dict[str, np.ndarray] = {}
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
    fingerprint = content_fingerprint(root, [p for domain in groups for p in files[domain]], min(8, os.cpu_count() or 1))
    return FolderScan(root, nested, tuple(groups), classes, files, targets, fingerprint)


def read_class_map(path: Path, classes: Sequence[str]) -> dict[str, int]:
    """``folder,index`` lines (a ``folder,index`` header and ``#`` comments allowed, a UTF-8
    byte-order mark skipped); every class folder must be mapped, each onto its own index."""
    if not path.is_file():
        raise DataError(f"--class-map {path}: no such file")
    mapping: dict[str, int] = {}
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # a spreadsheet's "CSV UTF-8" starts with a byte-order mark
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
    used: dict[int, str] = {}
    for c in classes:
        other = used.setdefault(mapping[c], c)
        if other != c:
            raise DataError(
                f"--class-map {path} maps the class folders {other!r} and {c!r} onto one index, {mapping[c]}; a prediction "
                "can only be one of them, so give each folder its own index (or merge the two folders)"
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
#: Largest image a folder may hold (pixels, as its header states them) and largest size the
#: model's resize may make of one: 64 M pixels (8,000 × 8,000), 192 MB of RGB. A file of a few
#: KB can claim more (a "decompression bomb"), or be 1 × 60,000 px and ask for gigabytes once
#: its short side is resized; both are refused in one line naming the file.
MAX_IMAGE_PIXELS = 64_000_000
# Pillow warns (on stderr) above its own bound before refusing above twice it: as an error, the
# warning becomes the same one line (the bound above is lower, so no image we accept meets it)
warnings.filterwarnings("error", category=Image.DecompressionBombWarning)
_DECODE_ERRORS = (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError, Image.DecompressionBombWarning)


def check_size(path: Path, size: tuple[int, int], resize: int | None) -> None:
    """The decoded and the resized image stay within :data:`MAX_IMAGE_PIXELS` (DataError)."""
    w, h = size
    if w * h > MAX_IMAGE_PIXELS:
        raise DataError(f"image {path} is {w} x {h} px, more than the {MAX_IMAGE_PIXELS:,} pixels an image may have")
    if resize is not None and min(w, h) > 0:
        long_side = resize * max(w, h) / min(w, h)
        if resize * long_side > MAX_IMAGE_PIXELS:
            raise DataError(
                f"image {path} is {w} x {h} px: resized to {resize} px on its short side it would have "
                f"{resize * long_side:,.0f} pixels, more than {MAX_IMAGE_PIXELS:,}; crop it to a usable shape"
            )


#: 16-bit integer modes Pillow decodes (a 16-bit greyscale PNG is ``I;16`` or, in older Pillows, ``I``)
_WIDE_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


def to_rgb(img: Image.Image, path: Path) -> Image.Image:
    """``img`` as 8-bit RGB, whatever mode Pillow decoded it in: 16-bit greyscale scaled from
    0..65535 (not clipped at 255), a palette's transparency and any alpha dropped (the stored
    colours kept, as torchvision's loader does), 1-bit, CMYK and the rest through Pillow's own
    conversion; a float image (mode ``F``, range unknown) is one line."""
    mode = img.mode
    if mode in _WIDE_MODES:
        array = np.asarray(img)
        if array.size and (int(array.min()) < 0 or int(array.max()) > 65535):
            raise DataError(f"image {path} is a {mode} image with values outside 0..65535; save it as an 8- or 16-bit image")
        eight = np.rint(array.astype(np.float64) * (255.0 / 65535.0)).astype(np.uint8)
        return Image.fromarray(eight, "L").convert("RGB")
    if mode == "F":
        raise DataError(f"image {path} holds 32-bit floats (mode F), whose range is not defined; save it as an 8- or 16-bit image")
    if mode in ("P", "PA") or "A" in mode or "a" in mode:
        img = img.convert("RGBA")  # a palette's transparency resolved without Pillow's warning
    return img.convert("RGB")


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
                check_size(path, img.size, self.preprocess.resize)
                img = to_rgb(img, path)
        except _DECODE_ERRORS as exc:
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
                with Image.open(path) as img:  # the header is parsed on open
                    check_size(path, img.size, self.preprocess.resize)
                    if img.mode == "F":
                        to_rgb(img, path)  # refused by its mode alone
            except _DECODE_ERRORS as exc:
                raise DataError(f"cannot decode image {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from None

        unique = sorted(set(int(i) for i in indices))
        if workers <= 1 or len(unique) < 64:
            for i in unique:
                check(i)
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for _ in pool.map(check, unique):
                pass
