"""What the running process is: the package's version, and whether it is the ``tempora-sim`` program.

Kept apart from the package's ``__init__`` (which reaches the whole notebook API on first use)
so that any wing may ask without importing the wings above it.
"""

from __future__ import annotations

#: True in the ``tempora-sim`` program (set by :func:`tempora_sim.commands.main.run`), False when a
#: notebook or another program imports the package: process-wide shortcuts that only the
#: program may take (Numba's start, :func:`tempora_sim.sweeps.replay.warm_kernels`) check it.
IN_PROGRAM = False


def version() -> str:
    """The installed distribution's version, read from its metadata (declared once, in
    pyproject.toml) when asked, not at import: the command line installs its Ctrl-C guard first."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _version

    try:
        return _version("tempora-tta")
    except PackageNotFoundError:  # a source tree on sys.path that was never installed
        return "0+unknown"
