"""Child interpreters that import the same code as the test that starts them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def child_env(**extra: str) -> dict[str, str]:
    """``os.environ`` with the repository's ``src`` and this process's import path on
    ``PYTHONPATH`` (installed or not, a child imports what the test imports), plus ``extra``."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), *sys.path]), **extra)
