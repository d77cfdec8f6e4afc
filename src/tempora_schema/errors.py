"""The one exception root of Tempora (torch-free, so both CLIs and the simulator share it).

Every problem a user can cause or fix (a bad option, a broken trace, an output that cannot be
written, an output another run holds) raises a :class:`TemporaError` subclass whose message is
the whole story in one line: what is wrong, where, and what to do. Both command-line tools print
it as ``tempora-trace: error: …`` / ``tempora-sim: error: …`` and exit with status 2. Anything
else escaping a command is a bug in Tempora.
"""

from __future__ import annotations

import errno
import os

#: Exit status of every refused input (as click's own usage errors).
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130


class TemporaError(Exception):
    """Base class: the message is one line that says what is wrong and what to do."""


class OptionError(TemporaError, ValueError):
    """An option value is malformed, out of range or not finite."""


class TraceSchemaError(TemporaError, ValueError):
    """A trace file breaks the schema; the message names the file and the rule."""

    def __init__(self, path: object, rule: str):
        self.path = str(path)
        self.rule = rule
        super().__init__(f"{self.path}: {rule}")


class OutputError(TemporaError):
    """An output cannot be written, or is in a state a run must not silently overwrite."""


class OutputLockedError(OutputError):
    """Another process is writing the same output right now."""


# What to do about each kind of failed write, keyed by errno.
_ADVICE = {
    errno.EACCES: ("permission denied", "choose a writable --out or change the folder's permissions"),
    errno.EPERM: ("operation not permitted", "choose a writable --out or change the folder's permissions"),
    errno.EROFS: ("read-only file system", "choose an --out on a writable file system"),
    errno.ENOSPC: ("no space left on the device", "free some space or choose an --out on another disk"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or choose an --out on another disk"),
    errno.ENOTDIR: ("a component of the path is a file, not a folder", "choose another --out"),
    errno.EISDIR: ("it is a folder where a file is needed", "choose another name"),
    errno.ELOOP: ("too many levels of symbolic links (a symlink loop?)", "fix or remove the link"),
    errno.ENAMETOOLONG: ("file name too long", "choose a shorter --out"),
    errno.EEXIST: ("it already exists", "remove it or choose another --out"),
    errno.ENOENT: ("no such file or folder", "check the path"),
    errno.EIO: ("input/output error", "check the disk"),
}


def describe_os_error(exc: OSError, path: object | None = None, action: str = "cannot write") -> str:
    """One line for a failed file operation: ``cannot write PATH: permission denied; choose …``."""
    where = path if path is not None else (exc.filename or "output")
    if exc.errno in _ADVICE:
        what, todo = _ADVICE[exc.errno]
        return f"{action} {os.fsdecode(where) if isinstance(where, bytes) else where}: {what}; {todo}"
    text = str(exc).strip()
    reason = exc.strerror or (text.splitlines()[0] if text else type(exc).__name__)
    return f"{action} {where}: {reason}"


def output_error(exc: OSError, path: object | None = None, action: str = "cannot write") -> OutputError:
    """:class:`OutputError` carrying :func:`describe_os_error`'s line."""
    return OutputError(describe_os_error(exc, path, action))
