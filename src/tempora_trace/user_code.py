"""The one loader of the user's own Python code: a method file (``PATH.py:CLASS``), a model
factory's file (``PATH.py:FACTORY``) and the modules named by ``MODULE:NAME``.

A file is imported once per content. Its module's name carries the SHA-256 of the file, so
the same bytes loaded twice (as a method, as a model, or both) are one module, and an edited
file is a new one. The helper files it imports from its own folder are recorded by content
too: when one of them changes, the file and its helpers are imported afresh, and
:func:`code_sha256` (the digest a trace's identity records) changes with them.

The user's code is imported as a guest (:func:`user_import`): no ``__pycache__`` is written
beside their files, and ``sys.argv`` holds only the file's path, so a module that parses
arguments when imported does not read Tempora's command line. Whatever the import raises,
``sys.exit()`` included, comes back as one :class:`UserImportError`; each caller turns it into
its own one-line message (a method's, a model's)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path
from types import ModuleType

#: The prefix of the module name a user's file is imported under.
MODULE_PREFIX = "tempora_user_code_"


class UserImportError(Exception):
    """The user's code raised while it was imported; ``cause`` is what it raised."""

    def __init__(self, what: str, cause: BaseException):
        super().__init__(f"cannot import {what}: {type(cause).__name__}: {cause}")
        self.cause = cause


class NotPythonError(ValueError):
    """The path names no file Python can import as a module."""


@dataclass(frozen=True)
class LoadedFile:
    """A user's file, imported: its module and the digest of its code (the file and the helper
    files it imported from its folder)."""

    module: ModuleType
    path: Path
    sha256: str


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def code_sha256(own: str, imports: dict[str, str]) -> str:
    """The digest of a file's code: its own bytes' digest alone when it imports nothing from its
    folder, else a digest over it and every such file (path and digest), so an edited helper
    changes the identity as an edited file does."""
    if not imports:
        return own
    digest = hashlib.sha256(own.encode())
    for rel, sha in sorted(imports.items()):
        digest.update(f"\0{rel}\0{sha}".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


# ------------------------------------------------------------------------ distributions
@functools.lru_cache(maxsize=1)
def _packages() -> dict[str, list[str]]:
    """Top-level package → distributions providing it (a scan of every installed distribution,
    so done once; :func:`forget_distributions` forgets it)."""
    return packages_distributions()


def forget_distributions() -> None:
    """Forget the installed distributions (after installing one in this process)."""
    _packages.cache_clear()


def distribution_of(module_name: str) -> tuple[str, str] | None:
    """(name, version) of the installed distribution providing the top-level package of
    ``module_name``, or None."""
    top = module_name.split(".", 1)[0]
    for dist in _packages().get(top, []):
        try:
            return dist, version(dist)
        except PackageNotFoundError:
            continue
    return None


# ------------------------------------------------------------------------ helper files
#: module name → {path relative to its folder: SHA-256} of the Python files of the module's own
#: folder (or package) first imported while the user's file or module was imported
_HELPERS: dict[str, dict[str, str]] = {}


def helpers(module_name: str) -> dict[str, str]:
    """The helper files (path relative to the folder: SHA-256) recorded for a user's module."""
    return _HELPERS.get(module_name, {})


def _local_imports(before: set[str], folder: Path, own: Path) -> dict[str, str]:
    """The Python files below ``folder`` (other than ``own``) of every module imported since
    ``before`` was taken: the helpers a user's file or package brings along, by content."""
    found: dict[str, str] = {}
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for name in set(sys.modules) - before:
        file = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(file, str):
            continue
        try:
            path = Path(file).resolve()
        except (OSError, RuntimeError):
            continue
        if path == own or folder not in path.parents or not path.is_file():
            continue
        # a library the code imports for the first time is not the user's code, even when the
        # environment lives below the user's folder (its distribution's version says it)
        if {"site-packages", "dist-packages"} & set(path.parts) or any(p in path.parents for p in prefixes):
            continue
        if distribution_of(name) is not None:
            continue
        found[path.relative_to(folder).as_posix()] = file_sha256(path)
    return found


def _unchanged(folder: Path, recorded: dict[str, str]) -> bool:
    try:
        return all(file_sha256(folder / rel) == sha for rel, sha in recorded.items())
    except OSError:
        return False


def _forget(name: str, folder: Path, recorded: dict[str, str]) -> None:
    """Drop a user's module and the helper modules it imported from ``sys.modules``."""
    helper_files = {(folder / rel).resolve() for rel in recorded}
    for other, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and Path(file).resolve() in helper_files:
            del sys.modules[other]
    sys.modules.pop(name, None)
    _HELPERS.pop(name, None)


# ------------------------------------------------------------------------ loading
@contextlib.contextmanager
def user_import(path: Path | str):
    """Import the user's code as a guest: no ``__pycache__`` written beside their files, and
    ``sys.argv`` holding only the file's path (or module's name)."""
    saved_bytecode, saved_argv = sys.dont_write_bytecode, sys.argv
    sys.dont_write_bytecode = True
    sys.argv = [str(path)]
    try:
        yield
    finally:
        sys.dont_write_bytecode = saved_bytecode
        sys.argv = saved_argv


def module_name(path: Path, digest: str) -> str:
    """The module name of a file of content ``digest``: one per content, whoever loads it."""
    return f"{MODULE_PREFIX}{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{digest[:12]}"


def load_file(path: str | Path) -> LoadedFile:
    """Import a user's Python file once per content (its own and its helpers').

    Raises :class:`FileNotFoundError` or :class:`IsADirectoryError` for a missing path or a
    folder, :class:`NotPythonError` for a file Python cannot import, :class:`UserImportError`
    for anything the file raises while imported (``KeyboardInterrupt`` aside)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(path) if not path.exists() else IsADirectoryError(path)
    path = path.resolve()
    digest = file_sha256(path)
    name = module_name(path, digest)
    if name in sys.modules:
        recorded = helpers(name)
        if _unchanged(path.parent, recorded):
            return LoadedFile(sys.modules[name], path, code_sha256(digest, recorded))
        _forget(name, path.parent, recorded)  # a helper changed since: import the file and its helpers afresh
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise NotPythonError(path)
    module = importlib.util.module_from_spec(spec)
    before = set(sys.modules)
    sys.modules[name] = module
    try:
        with user_import(path):
            spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as exc:  # sys.exit() in the user's file is an error like any other
        del sys.modules[name]
        raise UserImportError(str(path), exc) from exc
    _HELPERS[name] = _local_imports(before, path.parent, path)
    return LoadedFile(module, path, code_sha256(digest, _HELPERS[name]))


def import_module(name: str) -> ModuleType:
    """Import an importable module of the user's (``MODULE:NAME``) as a guest, recording the
    helper files of its package by content. Errors propagate as raised (``ModuleNotFoundError``
    included, so a caller can tell a missing module from a failing one); ``SystemExit`` too."""
    before = set(sys.modules)
    with user_import(name):
        module = importlib.import_module(name)
    if name not in _HELPERS:
        file = getattr(module, "__file__", None)
        top = getattr(sys.modules.get(name.split(".", 1)[0]), "__file__", None)
        if isinstance(file, str) and isinstance(top, str):
            own = Path(file).resolve()
            folder = Path(top).resolve().parent  # the package's folder (a lone module's own folder)
            _HELPERS[name] = _local_imports(before, folder, own)
    return module
