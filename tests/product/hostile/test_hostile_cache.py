"""Hostile trace-cache entries: a cache may make a sweep faster, never different.

Every entry below is damaged the way a hostile user (or a bad disk) would: the header edited
in place (a renamed method, another class count, an array's declared length), a flipped bit in
the arrays, a symbolic link to ``/dev/zero``, a folder or an oversized sparse file where the
entry goes. Each time the sweep through the damaged cache must print exactly what a sweep with
the cache off prints, print no warning or error, and leave a good entry in place of the bad one
(byte for byte what a fresh cache writes), so later sweeps do not meet it again.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from helpers.hostile import invoke
from tempora_sim.commands.main import main
from tempora_sim.sweeps import trace_cache
from tempora_sim.sweeps.synthetic import write_trace_set

SMALL = dict(num_batches=24, episodes=("fog", "snow"), checkpoints=(0, 4), frozen_eval=4, batch_size=8, num_classes=10)
SWEEP = ["--protocol", "all", "--skipped", "random", "--rho", "1,0.5", "--format", "json"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    write_trace_set(tmp_path / "traces", ("standard", "tent"), **SMALL)
    return tmp_path


def _sweep(ws: Path, cache: str) -> tuple[str, str]:
    res = invoke(main, ["sweep", ws / "traces", *SWEEP], env={trace_cache.CACHE_ENV: cache})
    assert res.exit_code == 0, res.stderr
    return res.stdout, res.stderr


def _entries(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob(f"*{trace_cache.SUFFIX}")) if p.is_file()}


def _tent_entry(folder: Path) -> Path:
    return next(p for p in folder.glob(f"*{trace_cache.SUFFIX}") if b'"method": "tent"' in p.read_bytes())


def _same_length(data: bytes, pattern: bytes, replace) -> bytes:
    """Replace the first match of ``pattern`` by ``replace(match)``, padded with JSON spaces to
    the same length, so nothing but the header's meaning changes."""
    match = re.search(pattern, data)
    assert match is not None, pattern
    new = replace(match)
    assert len(new) <= len(match.group(0))
    return data[: match.start()] + new + b" " * (len(match.group(0)) - len(new)) + data[match.end() :]


def _edit(entry: Path, pattern: bytes, replace) -> None:
    entry.write_bytes(_same_length(entry.read_bytes(), pattern, replace))


def _shorter_array(m: re.Match) -> bytes:
    return m.group(1) + str(int(m.group(2)) - 1).encode() + b","


def _flip_body_bit(entry: Path) -> None:
    data = bytearray(entry.read_bytes())
    data[-100] ^= 1
    entry.write_bytes(bytes(data))


def _to_dev_zero(entry: Path) -> None:
    entry.unlink()
    os.symlink("/dev/zero", entry)


def _folder(entry: Path) -> None:
    entry.unlink()
    entry.mkdir()
    (entry / "inside").write_text("x")


def _oversized(entry: Path) -> None:
    size = trace_cache.max_entry_bytes(1 << 20) + 1  # beyond the bound for any trace of this test
    with open(entry, "r+b") as fh:
        fh.truncate(size)  # sparse: no disk space, but reading it whole would take gigabytes


DAMAGE = {
    "method renamed in the header": lambda e: _edit(e, rb'"method": "tent"', lambda m: b'"method": "tant"'),
    "num_classes changed in the header": lambda e: _edit(e, rb'"num_classes": 10', lambda m: b'"num_classes": 90'),
    "an array's declared length": lambda e: _edit(e, rb'("a": \["<f8", )(\d+),', _shorter_array),
    "header length field": lambda e: e.write_bytes(e.read_bytes()[:52] + b"\x00" * 8 + e.read_bytes()[60:]),
    "a bit of the arrays": _flip_body_bit,
    "a symbolic link to /dev/zero": _to_dev_zero,
    "a folder": _folder,
    "a sparse file beyond the size bound": _oversized,
}


#: Cases this module adds to the hostile-input suite (docs/reference/errors.md counts them).
CASE_COUNT = len(DAMAGE)


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_entry_changes_nothing_and_is_rewritten(case, ws):
    uncached, _ = _sweep(ws, "off")
    fresh = ws / "fresh-cache"
    _sweep(ws, str(fresh))
    cache = ws / "cache"
    first, _ = _sweep(ws, str(cache))
    assert first == uncached and _entries(cache) == _entries(fresh)
    entry = _tent_entry(cache)
    DAMAGE[case](entry)
    if case != "a folder":  # a folder cannot be replaced by a file; the cache steps aside for it
        assert trace_cache.load(entry, (ws / "traces" / "tent.parquet").stat().st_size) is None
    out, err = _sweep(ws, str(cache))
    assert out == uncached, f"{case}: the damaged cache changed the results"
    assert "warning" not in err and "error" not in err and "Traceback" not in err, err
    if case == "a folder":
        assert entry.is_dir() and _entries(cache) == {k: v for k, v in _entries(fresh).items() if k != entry.name}
    else:
        assert not entry.is_symlink() and _entries(cache) == _entries(fresh), f"{case}: the damaged entry was kept"
    again, _ = _sweep(ws, str(cache))
    assert again == uncached


def test_every_byte_of_an_entry_is_checked(ws):
    """Any single-byte change anywhere in an entry (magic, digest, header, padding, arrays) is
    refused by the reader: the SHA-256 covers all of it."""
    cache = ws / "cache"
    _sweep(ws, str(cache))
    data = _tent_entry(cache).read_bytes()
    assert trace_cache.decode(data) is not None
    for at in range(0, len(data), max(1, len(data) // 400)):
        damaged = data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :]
        assert trace_cache.decode(damaged) is None, f"a change at byte {at} was not noticed"
    assert trace_cache.decode(data + b" ") is None and trace_cache.decode(data[:-1]) is None
