"""Where Tempora keeps what it generates or caches on this machine.

``$TEMPORA_HOME`` when set, else the platform's per-user cache folder for ``tempora``
(``~/.cache/tempora`` on Linux, honouring ``$XDG_CACHE_HOME``; ``~/Library/Caches/tempora`` on
macOS; ``%LOCALAPPDATA%\\tempora\\Cache`` on Windows), as platformdirs defines it.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def tempora_home(home: str | os.PathLike | None = None) -> Path:
    """The cache root: ``home`` if given, else ``$TEMPORA_HOME``, else the user cache folder."""
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get("TEMPORA_HOME")
    if env:
        return Path(env).expanduser()
    return platformdirs.user_cache_path("tempora", appauthor=False)
