"""Campaign files for the campaign tests: written to a folder, and run twice by the local engine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tempora_trace.campaign import load_campaign, run_local

#: a demo split small enough for real campaign runs in tests
DEMO_ENV = {"TEMPORA_DEMO_TEST_SIZE": "256"}


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run_twice(folder: Path, text: str):
    """The campaign ``text`` written to ``folder`` and run by the local engine on the small demo
    split, then run again: (campaign, first results, their files' mtimes, second results)."""
    path = write(folder, text)
    mp = pytest.MonkeyPatch()
    for k, v in DEMO_ENV.items():
        mp.setenv(k, v)
    try:
        campaign = load_campaign(path)
        first = run_local(campaign)
        mtimes = {r.path: os.stat(r.path).st_mtime_ns for r in first}
        second = run_local(campaign)
    finally:
        mp.undo()
    return campaign, first, mtimes, second
