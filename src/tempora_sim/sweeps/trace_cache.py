"""A cache of validated traces, so a warm sweep does not decode and validate Parquet again.

Reading ten paper-sized traces with exact frozen evaluation (2.4 M rows) costs about a second
of decoding and validation; the replay needs a few flat arrays per trace
(:class:`tempora_sim.sweeps.traces.ReplayArrays`). After a file has been read and fully validated,
those arrays and its metadata are stored in one cache entry; the next read of the same bytes
loads the entry instead.

The key is the SHA-256 of the file's bytes together with a fingerprint of the reader (the
source of the modules that read, validate and flatten a trace, and the numpy and polars
versions): an edited file, or a reader that changed, never meets an old entry. An entry
carries a SHA-256 of every byte after its magic line (the header with the metadata, array
layout and lengths, and the arrays): one that is truncated, damaged, edited anywhere (header
included), larger than :func:`max_entry_bytes` allows for its trace, not a regular file (a
symbolic link to ``/dev/zero``) or unreadable is ignored and written again, so the cache can
make a sweep faster but never different. Entries are written under a temporary name and
renamed into place, so readers never see half an entry. A folder that cannot be created or written is no error: the traces
are read as if there were no cache.

Where: ``$TEMPORA_TRACE_CACHE`` if set (``off`` turns the cache off), else ``trace-cache``
under ``$TEMPORA_HOME``, else under the user cache folder for ``tempora`` (platformdirs:
``~/.cache/tempora/trace-cache`` on Linux). Deleting the folder clears it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import struct
from pathlib import Path

import numpy as np
import platformdirs
import polars as pl

import tempora_schema
from tempora_schema.errors import OutputError
from tempora_sim import process
from tempora_toolkit.atomic_files import write_file

#: Environment variable: the cache folder, or ``off`` to read every trace from its file.
CACHE_ENV = "TEMPORA_TRACE_CACHE"
#: Values of :data:`CACHE_ENV` that turn the cache off.
OFF_VALUES = frozenset({"off", "0", "no", "false", "none"})
#: File name suffix of an entry.
SUFFIX = ".tcache"
_MAGIC = b"TEMPORA-TRACE-CACHE\n"
_FORMAT = 2
_DIGEST = 32  # SHA-256 of everything after it
_PREFIX = len(_MAGIC) + _DIGEST + 8  # magic, digest, header length
#: An entry may be at most this many times its trace file's size, plus :data:`SIZE_SLACK`
#: bytes; a larger one is ignored unread. The arrays hold at most a few numbers per trace row,
#: which the Parquet file stores too, so a real entry is far below the bound.
SIZE_FACTOR = 64
SIZE_SLACK = 64 << 20
_ALIGN = 64
#: The arrays of an entry, in file order (ReplayArrays fields).
ARRAY_FIELDS = (
    "a",
    "e",
    "l",
    "delta",
    "lengths",
    "ck_counts",
    "ck_values",
    "row_counts",
    "f_steps",
    "f_suf_correct",
    "f_suf_n",
    "has_frozen",
    "adapt_delta",
)


def cache_dir(setting: str | os.PathLike | bool | None = None) -> Path | None:
    """The cache folder, or ``None`` when the cache is off.

    ``setting``: ``False`` turns the cache off, a path chooses the folder, ``None`` or
    ``True`` follows :data:`CACHE_ENV` (then ``$TEMPORA_HOME``, then the user cache folder)."""
    if setting is False:
        return None
    if setting is not None and setting is not True:
        return Path(setting).expanduser()
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return None if env.lower() in OFF_VALUES else Path(env).expanduser()
    home = os.environ.get("TEMPORA_HOME")
    if home:
        return Path(home).expanduser() / "trace-cache"
    return platformdirs.user_cache_path("tempora", appauthor=False) / "trace-cache"


@functools.cache
def reader_fingerprint() -> str:
    """Digest of what turns a file into cached arrays: the reading, validating and
    flattening code, and the numpy and polars versions."""
    digest = hashlib.sha256(f"format {_FORMAT}; numpy {np.__version__}; polars {pl.__version__}".encode())
    here = Path(__file__)
    for source in (Path(tempora_schema.__file__ or ""), here.with_name("traces.py"), here):
        try:
            digest.update(source.read_bytes())
        except OSError:  # no source on disk (a zip import): the code is what the version says
            digest.update(f"{source.name} {process.version()}".encode())
    return digest.hexdigest()[:16]


def file_digest(path: Path) -> tuple[str, os.stat_result]:
    """SHA-256 of a file's bytes (hashlib releases the GIL, so files hash in parallel) and its
    stat before reading, to notice a file that changes while it is read."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        buf = bytearray(1 << 22)
        view = memoryview(buf)
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
    return digest.hexdigest(), st


def entry_path(folder: Path, content_digest: str) -> Path:
    return folder / f"{content_digest}-{reader_fingerprint()}{SUFFIX}"


def max_entry_bytes(trace_bytes: int) -> int:
    """The largest entry read for a trace file of ``trace_bytes`` bytes."""
    return SIZE_FACTOR * max(int(trace_bytes), 0) + SIZE_SLACK


def _pad(n: int) -> int:
    return -n % _ALIGN


def encode(meta: dict, version: int, canonical: bool, replay) -> bytes:
    """One entry: magic, SHA-256 of the rest, header length, JSON header, then the arrays,
    64-byte aligned."""
    arrays = [np.ascontiguousarray(getattr(replay, name)) for name in ARRAY_FIELDS]
    specs, offset = [], 0
    for arr in arrays:
        specs.append([arr.dtype.str, int(arr.shape[0]), offset])
        offset += arr.nbytes + _pad(arr.nbytes)
    body = bytearray(offset)
    for arr, (_, _, start) in zip(arrays, specs):
        body[start : start + arr.nbytes] = arr.tobytes()
    header = {
        "format": _FORMAT,
        "meta": meta,
        "version": version,
        "canonical": bool(canonical),
        "episodes": list(replay.episodes),
        "updates_parameters": bool(replay.updates_parameters),
        "arrays": dict(zip(ARRAY_FIELDS, specs)),
        "body_bytes": len(body),
    }
    head = json.dumps(header, allow_nan=False).encode("utf-8")
    head += b" " * _pad(_PREFIX + len(head))
    rest = struct.pack("<Q", len(head)) + head + bytes(body)
    return _MAGIC + hashlib.sha256(rest).digest() + rest


def decode(data: bytes) -> tuple[dict, int, bool, dict] | None:
    """``(meta, version, canonical, fields of ReplayArrays)`` of an entry, or ``None`` when it
    is not a whole, intact entry of this format: every byte is checked (the magic line as
    such, the rest against its SHA-256), then the header's types and the arrays' layout."""
    try:
        if len(data) < _PREFIX or not data.startswith(_MAGIC):
            return None
        rest = memoryview(data)[len(_MAGIC) + _DIGEST :]
        if hashlib.sha256(rest).digest() != data[len(_MAGIC) : len(_MAGIC) + _DIGEST]:
            return None
        (head_len,) = struct.unpack_from("<Q", data, len(_MAGIC) + _DIGEST)
        start = _PREFIX + head_len
        header = json.loads(data[_PREFIX:start])
        if not isinstance(header, dict) or header.get("format") != _FORMAT or len(data) - start != header["body_bytes"]:
            return None
        body = memoryview(data)[start:]
        arrays = header["arrays"]
        if not isinstance(arrays, dict) or set(arrays) != set(ARRAY_FIELDS):
            return None
        fields = {}
        for name in ARRAY_FIELDS:
            dtype, length, offset = arrays[name]
            dtype = np.dtype(dtype)
            if not (isinstance(length, int) and isinstance(offset, int)) or length < 0 or offset < 0:
                return None
            if dtype.kind not in "biuf" or offset + dtype.itemsize * length > len(body):
                return None
            fields[name] = np.frombuffer(body, dtype, count=length, offset=offset)
        episodes, meta = header["episodes"], header["meta"]
        if not isinstance(episodes, list) or not all(isinstance(e, str) for e in episodes) or not isinstance(meta, dict):
            return None
        flags = (header["updates_parameters"], header["canonical"])
        if not all(isinstance(f, bool) for f in flags) or not isinstance(header["version"], int):
            return None
        fields["episodes"] = list(episodes)
        fields["updates_parameters"] = flags[0]
        return meta, header["version"], flags[1], fields
    except (ValueError, KeyError, TypeError, IndexError, struct.error, RecursionError):
        return None


def load(entry: Path, trace_bytes: int) -> tuple[dict, int, bool, dict] | None:
    """The decoded entry at ``entry`` for a trace file of ``trace_bytes`` bytes, or ``None``:
    missing, unreadable, not a regular file (a symbolic link is not followed), larger than
    :func:`max_entry_bytes`, or damaged. At most that many bytes are ever read."""
    limit = max_entry_bytes(trace_bytes)
    try:
        fd = os.open(entry, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        with open(fd, "rb", closefd=True) as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                return None
            data = fh.read(limit + 1)
    except (OSError, MemoryError):
        return None
    if len(data) > limit:
        return None
    return decode(data)


def store(entry: Path, data: bytes) -> None:
    """Write an entry atomically (:func:`tempora_toolkit.atomic_files.write_file`); any failure leaves
    no entry and is silent: the cache only ever saves time."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        write_file(entry, data)
    except (OSError, OutputError):
        pass
