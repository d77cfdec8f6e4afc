"""What every hostile-input case asserts, and the faults it can inject.

A refused case must: exit with status 2, print exactly one line on stderr that starts with
``PROG: error:``, print no traceback, and leave every file and folder of the workspace exactly
as it was (no partial output, nothing the user had lost or changed). Faults a test cannot
create for real on every machine (a read-only folder when running as root, a full disk) are
injected at the system-call layer for paths below one folder only.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from click.testing import CliRunner


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry below ``root``: kind, permissions and content hash (links by target)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), hashlib.sha1(path.read_bytes()).hexdigest())
    return out


def invoke(cli, args, env=None):
    """Run a click group in-process; stdout and stderr separately."""
    return CliRunner(env=env).invoke(cli, [str(a) for a in args], catch_exceptions=True)


def assert_refused(result, prog: str, needle: str, before: dict | None = None, root: Path | None = None) -> str:
    """Exit 2, one stderr line ``PROG: error: …`` holding ``needle``, no traceback, and the
    workspace unchanged. Returns the line."""
    err = result.stderr
    everything = result.output + err
    assert result.exception is None or isinstance(result.exception, SystemExit), f"unexpected exception {result.exception!r}\n{everything}"
    assert "Traceback" not in everything, everything
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{err}"
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert result.exit_code == 2, (result.exit_code, everything)
    if before is not None:
        after = snapshot(root)
        assert after == before, _diff(before, after)
    return lines[0]


def _diff(before: dict, after: dict) -> str:
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    return f"workspace changed: added {added}, removed {removed}, changed {changed}"


def _under(path, prefix: str) -> bool:
    try:
        return os.path.abspath(os.fsdecode(path)).startswith(prefix)
    except (TypeError, ValueError):
        return False


def inject_errno(monkeypatch, below: Path, code: int, calls=("open", "mkdir", "rename", "replace")) -> None:
    """Make the named ``os`` calls fail with ``code`` for paths below ``below`` (a read-only
    folder, a full disk, ...), as the kernel would; ``write``/``fsync`` by the file behind the fd."""
    prefix = os.path.abspath(below)

    def wrap(name):
        real = getattr(os, name)

        if name in ("write", "fsync"):

            def fake(fd, *args, **kwargs):
                try:
                    target = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    target = ""
                if target.startswith(prefix):
                    raise OSError(code, os.strerror(code))
                return real(fd, *args, **kwargs)
        else:

            def fake(path, *args, **kwargs):
                paths = [path] + [a for a in args[:1] if isinstance(a, (str, bytes, os.PathLike))]
                if any(_under(p, prefix) for p in paths if isinstance(p, (str, bytes, os.PathLike))):
                    raise OSError(code, os.strerror(code), os.fsdecode(path))
                return real(path, *args, **kwargs)

        return fake

    for name in calls:
        monkeypatch.setattr(os, name, wrap(name))


def user_workspace(cifar_c_root: Path, monkeypatch) -> Path:
    """The folder above a tiny CIFAR-10-C root, with a file of the user's own that must survive."""
    monkeypatch.setenv("TORCH_HOME", str(cifar_c_root.parent / "torch-home"))
    (cifar_c_root.parent / "notes.txt").write_text("the user's own file")
    return cifar_c_root.parent
