"""A cache of validated traces, so a warm sweep does not decode and validate Parquet again.

Reading ten paper-sized traces with exact frozen evaluation (2.4 M rows) costs about a second
of decoding and validation; the replay needs a few flat arrays per trace
(:class:`tempora_sim.traces.ReplayArrays`). After a file has been read and fully validated,
those arrays and its metadata are stored in one cache entry; the next read of the same bytes
loads the entry instead.

The key is the SHA-256 of the file's bytes together with a fingerprint of the reader (the
source of the modules that read, validate and flatten a trace, and the numpy and polars
versions): an edited file, or a reader that changed, never meets an old entry. An entry
carries a CRC-32 of its contents; one that is truncated, damaged or unreadable is ignored and
written again. Entries are written under a temporary name and renamed into place, so readers
never see half an entry. A folder that cannot be created or written is no error: the traces
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
import struct
import zlib
from pathlib import Path

import numpy as np

#: Environment variable: the cache folder, or ``off`` to read every trace from its file.
CACHE_ENV = "TEMPORA_TRACE_CACHE"
#: Values of :data:`CACHE_ENV` that turn the cache off.
OFF_VALUES = frozenset({"off", "0", "no", "false", "none"})
#: File name suffix of an entry.
SUFFIX = ".tcache"
_MAGIC = b"TEMPORA-TRACE-CACHE\n"
_FORMAT = 1
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
    import platformdirs

    return platformdirs.user_cache_path("tempora", appauthor=False) / "trace-cache"


@functools.cache
def reader_fingerprint() -> str:
    """Digest of what turns a file into cached arrays: the reading, validating and
    flattening code, and the numpy and polars versions."""
    import polars as pl

    import tempora_schema

    digest = hashlib.sha256(f"format {_FORMAT}; numpy {np.__version__}; polars {pl.__version__}".encode())
    here = Path(__file__)
    for source in (Path(tempora_schema.__file__ or ""), here.with_name("traces.py"), here):
        try:
            digest.update(source.read_bytes())
        except OSError:  # no source on disk (a zip import): the code is what the version says
            import tempora_sim

            digest.update(f"{source.name} {tempora_sim.__version__}".encode())
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


def _pad(n: int) -> int:
    return -n % _ALIGN


def encode(meta: dict, version: int, canonical: bool, replay) -> bytes:
    """One entry: magic, header length, JSON header, then the arrays, 64-byte aligned."""
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
        "body_crc32": zlib.crc32(body),
    }
    head = json.dumps(header, allow_nan=False).encode("utf-8")
    head += b" " * _pad(len(_MAGIC) + 8 + len(head))
    return _MAGIC + struct.pack("<Q", len(head)) + head + bytes(body)


def decode(data: bytes) -> tuple[dict, int, bool, dict] | None:
    """``(meta, version, canonical, fields of ReplayArrays)`` of an entry, or ``None`` when it
    is not a whole, intact entry of this format."""
    try:
        if not data.startswith(_MAGIC):
            return None
        (head_len,) = struct.unpack_from("<Q", data, len(_MAGIC))
        start = len(_MAGIC) + 8 + head_len
        header = json.loads(data[len(_MAGIC) + 8 : start])
        if header.get("format") != _FORMAT or len(data) - start != header["body_bytes"]:
            return None
        body = memoryview(data)[start:]
        if zlib.crc32(body) != header["body_crc32"]:
            return None
        fields = {}
        for name in ARRAY_FIELDS:
            dtype, length, offset = header["arrays"][name]
            dtype = np.dtype(dtype)
            if dtype.kind not in "biuf" or offset < 0 or offset + dtype.itemsize * length > len(body):
                return None
            fields[name] = np.frombuffer(body, dtype, count=length, offset=offset)
        fields["episodes"] = [str(e) for e in header["episodes"]]
        fields["updates_parameters"] = bool(header["updates_parameters"])
        if not isinstance(header["meta"], dict):
            return None
        return header["meta"], int(header["version"]), bool(header["canonical"]), fields
    except (ValueError, KeyError, TypeError, IndexError, struct.error, RecursionError):
        return None


def load(entry: Path) -> tuple[dict, int, bool, dict] | None:
    """The decoded entry at ``entry``, or ``None`` (missing, unreadable or damaged)."""
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    return decode(data)


def store(entry: Path, data: bytes) -> None:
    """Write an entry atomically (:func:`tempora_schema.outputs.write_file`); any failure leaves
    no entry and is silent: the cache only ever saves time."""
    from tempora_schema.errors import OutputError
    from tempora_schema.outputs import write_file

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        write_file(entry, data)
    except (OSError, OutputError):
        pass
