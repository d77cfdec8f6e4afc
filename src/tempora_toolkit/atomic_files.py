"""Every file Tempora writes goes through here: atomic, durable, locked, and one-line errors.

* :func:`write_file` writes bytes to a temporary name beside the target, ``fsync``s it, renames
  it over the target (``os.replace`` is atomic) and ``fsync``s the folder: a reader sees the old
  file or the new one, never half of one, even after a crash or a full disk.
* :func:`staged_dir` builds a whole output folder (a sweep's results, a report) in a private
  staging folder and publishes it only when everything was written; a failure leaves the
  previous output untouched.
* :func:`output_lock` keeps two processes from writing one output at once; the loser is told
  the holder's PID.
* Permissions come from the umask (files 0666 & ~umask, folders 0777 & ~umask), as for any file
  the user creates; every ``OSError`` becomes an :class:`~tempora_schema.errors.OutputError`
  that names the path and what to do.

Tables are serialised in memory first (``to_bytes``), so a full disk or a missing permission
surfaces here as an ``OSError`` with its errno, never as a library's wrapped error.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Callable, Iterator

from tempora_schema import METADATA_KEY
from tempora_schema.errors import OutputError, OutputLockedError, describe_os_error

#: Suffix of the staging/temporary names (never ``.parquet``, so no reader picks them up).
TMP_MARK = ".tmp-"


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it the portable way (not thread-safe, only a fallback)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~_umask()


def dir_mode() -> int:
    return 0o777 & ~_umask()


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}-{secrets.token_hex(3)}")


def fsync_dir(path: Path) -> None:
    """Make a rename or creation in ``path`` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_file(path: str | os.PathLike, data: bytes | memoryview, *, what: str = "cannot write", mode: int | None = None) -> Path:
    """Atomically replace ``path`` by ``data`` (temporary name, fsync, rename, fsync folder).

    ``mode``: the permissions the new file gets (a file rewritten in place keeps its own);
    default what the umask gives. Raises :class:`OutputError` naming ``path`` on any failure;
    the target is then untouched and no temporary file is left."""
    path = Path(path)
    tmp = _tmp_name(path)
    fd = -1
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        if mode is not None:
            os.fchmod(fd, mode)
        _write_all(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(describe_os_error(exc, path, what)) from None
    fsync_dir(path.parent)
    return path


def to_bytes(write: Callable[[io.BytesIO], object]) -> bytes:
    """Serialise in memory: ``to_bytes(frame.write_parquet)``, ``to_bytes(lambda f: pq.write_table(t, f))``."""
    buffer = io.BytesIO()
    write(buffer)
    return buffer.getvalue()


def check_output_dir(out: str | os.PathLike, option: str = "--out", folders: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> Path:
    """Refuse an output folder that can never be written, before any work starts.

    ``out`` must be non-empty, must not be (or lie below) a regular file, must not be a symlink
    loop, and a file must be creatable in it (or in its nearest existing ancestor): a probe file
    is created and removed at once, so permissions, ACLs and read-only mounts all answer as the
    real write would. Nothing is left behind. ``folders``/``files`` are entries the output will
    write into an existing ``out``: a file where a folder goes (or the reverse) is refused now."""
    text = os.fspath(out)
    if not str(text).strip():
        raise OutputError(f"{option} is empty; give a folder")
    path = Path(text).expanduser()
    probe = path
    while True:
        try:
            st = os.stat(probe)
        except FileNotFoundError:
            if probe.is_symlink():
                raise OutputError(f"{option} {path}: {probe} is a dangling symbolic link; fix or remove it") from None
            parent = probe.parent
            if parent == probe:
                break
            probe = parent
            continue
        except OSError as exc:
            raise OutputError(describe_os_error(exc, path, option)) from None
        if not stat.S_ISDIR(st.st_mode):
            where = "is a file" if probe == path else f"lies below the file {probe}"
            raise OutputError(f"{option} {path} {where}, not a folder; choose another {option}")
        _probe_write(probe, path, option)
        break
    if path.is_dir():
        for name in folders:
            _check_kind(True, path / name)
        for name in files:
            _check_kind(False, path / name)
    return path


def _probe_write(folder: Path, out: Path, option: str) -> None:
    name = folder / f".tempora-probe{TMP_MARK}{os.getpid()}-{secrets.token_hex(3)}"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise OutputError(describe_os_error(exc, out, option)) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)


# ------------------------------------------------------------------------ locks
def _lock_path_for(target: Path) -> Path:
    """``<folder>/.<name>.lock`` beside the target; inside the target when only it is writable."""
    beside = target.with_name(f".{target.name}.lock")
    if target.is_dir() and not os.access(target.parent, os.W_OK | os.X_OK):
        return target / ".tempora.lock"
    return beside


def _holder_pid(lock_path: Path) -> str:
    try:
        text = lock_path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return text if text.isdigit() else ""


@contextlib.contextmanager
def output_lock(target: str | os.PathLike, what: str = "output") -> Iterator[Path]:
    """Hold an exclusive lock on ``target`` (file or folder) while the block writes it.

    Fails at once (no waiting) with :class:`OutputLockedError` naming the holder's PID, so two
    runs never interleave their files. The lock file ``.<name>.lock`` beside the target holds
    the PID and is removed on release; a crashed holder's lock is released by the kernel (its
    file stays, harmless, and is reused by the next run)."""
    from filelock import FileLock, Timeout  # lazy: both commands import this module at start-up; a lock is taken only to write

    target = Path(target)
    lock_path = _lock_path_for(target)

    def record_pid(fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    lock = FileLock(str(lock_path), timeout=0, on_acquired=record_pid, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        pid = _holder_pid(lock_path)
        holder = f"process {pid}" if pid else "another process"
        raise OutputLockedError(
            f"{target}: this {what} is being written by {holder} (lock {lock_path}); wait for it to finish or choose another --out"
        ) from None
    except OSError as exc:
        raise OutputError(describe_os_error(exc, target, "cannot lock")) from None
    try:
        yield lock_path
    finally:
        # Unlinked while still held: a contender that opened this inode sees it has no name left
        # and retries on a fresh file, so removing it never lets two holders in.
        with contextlib.suppress(OSError):
            os.unlink(lock_path)
        lock.release()


# ------------------------------------------------------------------------ whole folders
@contextlib.contextmanager
def staged_dir(
    out: str | os.PathLike, *, what: str = "output", last: tuple[str, ...] = (), folders: tuple[str, ...] = (), files: tuple[str, ...] = ()
) -> Iterator[Path]:
    """Build the folder ``out`` in a staging folder and publish it only if the block succeeds.

    A new ``out`` is the staging folder renamed into place. An existing ``out`` keeps the files
    this output does not write; each entry written replaces its namesake (folders whole), the
    names in ``last`` (e.g. ``report.md``) after the rest, so a complete old output is replaced
    by a complete new one. The block must write with :func:`write_file` (or any writer, whose
    ``OSError`` is reported against ``out``). Holds :func:`output_lock` on ``out`` throughout.
    ``folders``/``files``: entries the output will write, checked for a file-versus-folder
    clash in an existing ``out`` before any work (the rest are checked before publishing)."""
    out = check_output_dir(out, folders=folders, files=files)
    exists = out.is_dir()
    if not exists:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(describe_os_error(exc, out, "cannot write")) from None
    with output_lock(out, what):
        _remove_dead_stages(out)
        try:
            if exists:
                stage = out / f".staging{TMP_MARK}{os.getpid()}-{secrets.token_hex(3)}"
            else:
                stage = _tmp_name(out)
            stage.mkdir(mode=0o700)
        except OSError as exc:
            raise OutputError(describe_os_error(exc, out, "cannot write")) from None
        try:
            yield stage
            _publish(stage, out, exists, last)
        except OSError as exc:
            raise OutputError(describe_os_error(exc, _public(exc.filename, stage, out) or out, "cannot write")) from None
        except OutputError as exc:
            # a write into the staging folder names the file it will be in --out, not the hidden stage
            raise type(exc)(_public(str(exc), stage, out)) from None
        finally:
            if stage.exists():
                shutil.rmtree(stage, ignore_errors=True)


def _public(text: object, stage: Path, out: Path) -> str | None:
    """``text`` with the staging folder's path replaced by ``out`` (what the user asked for)."""
    if text is None:
        return None
    return os.fsdecode(text).replace(str(stage), str(out)) if isinstance(text, (str, bytes)) else str(text)


def _remove_dead_stages(out: Path) -> None:
    """Staging folders of ``out`` left by a run that was killed (SIGKILL, a power cut): hidden
    ``.staging.tmp-*`` inside it and ``.<name>.tmp-*`` beside it. Called under ``out``'s lock,
    so no live run owns them."""
    candidates = []
    with contextlib.suppress(OSError):
        candidates += [p for p in out.iterdir() if p.name.startswith(f".staging{TMP_MARK}")]
    with contextlib.suppress(OSError):
        candidates += [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}{TMP_MARK}")]
    for path in candidates:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


def _check_kind(stage_entry_is_dir: bool, dest: Path) -> None:
    if stage_entry_is_dir and (dest.exists() or dest.is_symlink()) and (dest.is_symlink() or not dest.is_dir()):
        raise OutputError(f"cannot write {dest}: a file is in the way of a folder of this output; remove it or choose another --out")
    if not stage_entry_is_dir and dest.is_dir() and not dest.is_symlink():
        raise OutputError(f"cannot write {dest}: a folder is in the way of a file of this output; remove it or choose another --out")


def _publish(stage: Path, out: Path, exists: bool, last: tuple[str, ...]) -> None:
    mode = dir_mode()
    for sub in [stage, *(p for p in stage.rglob("*") if p.is_dir())]:
        os.chmod(sub, mode)
    if not exists:
        try:
            os.rename(stage, out)
            fsync_dir(out.parent)
            return
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
                raise
            # someone created `out` meanwhile (not a Tempora writer: they hold the lock): merge below
    trash = stage / f".replaced{TMP_MARK}{secrets.token_hex(3)}"
    names = sorted(p.name for p in stage.iterdir())
    names = [n for n in names if n not in last] + [n for n in last if n in names]
    for name in names:  # every conflict is found before anything is replaced
        _check_kind((stage / name).is_dir(), out / name)
    for name in names:
        src, dest = stage / name, out / name
        if src.is_dir() and dest.is_dir():
            trash.mkdir(exist_ok=True)
            os.rename(dest, trash / name)
        os.replace(src, dest)
    fsync_dir(out)


# ------------------------------------------------------------------------ outputs beside traces
def trace_folder_above(out: str | os.PathLike) -> Path | None:
    """The nearest folder at or above ``out`` that directly holds a Tempora trace (a
    ``*.parquet`` with trace metadata), or ``None``. A file written there would be read as a
    trace by the next sweep of that folder."""
    import pyarrow.parquet as pq  # lazy: both commands import this module at start-up; pyarrow loads with the first trace

    try:
        dest = Path(out).expanduser().resolve()
    except (OSError, RuntimeError):
        return None
    for folder in (dest, *dest.parents):
        try:
            candidates = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))
        except OSError:
            continue
        for path in candidates:
            try:
                meta = pq.read_schema(path).metadata or {}
            except Exception:  # noqa: BLE001 - anything unreadable is no trace of ours
                continue
            if METADATA_KEY.encode() in meta:
                return folder
    return None
