"""Where a method comes from: the built-ins, the entry points other distributions declare, and
methods named by ``package.module:CLASS`` or ``PATH.py:CLASS``.

Three kinds of source, one lookup (:func:`resolve_method`):

- **built-in**: a module of this package defining a class decorated with ``register`` (found by
  importing the package's method modules once);
- **distribution**: an entry point of the group ``tempora.methods`` (``my-method =
  "my_pkg.module:MyMethod"`` in the distribution's ``pyproject.toml``). Entry points are listed
  from the installed distributions' metadata without importing anything; a plugin's module is
  imported only when that method is asked for;
- **spec**: ``package.module:CLASS`` (an importable module) or ``PATH.py:CLASS`` (a file).

Every method not built in carries its provenance (:class:`MethodSource`) into the trace's
metadata and identity: the distribution's name and version, or the file's path and SHA-256.
Everything a user can get wrong here (a module that does not import, a missing class, a class
that is not a method, two sources for one name) is one :class:`MethodError` line.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points as find
from pathlib import Path
from typing import Any

from .. import user_code
from .base import MethodError, TTAMethod

#: The entry-point group a distribution declares its methods in.
ENTRY_POINT_GROUP = "tempora.methods"
#: The package whose modules hold the built-in methods.
BUILTIN_PACKAGE = __name__.rsplit(".", 1)[0]
#: A method name must be usable as a file stem (traces are named after it).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


@dataclass(frozen=True)
class MethodSource:
    """Where a method class comes from.

    ``kind``: ``builtin``, ``distribution`` (an installed distribution, through its entry point
    or its importable module) or ``file`` (a Python file that belongs to no distribution).
    ``object``: ``module:Class`` (``Class`` for a file)."""

    kind: str
    object: str
    distribution: str | None = None
    version: str | None = None
    path: str | None = None
    sha256: str | None = None

    @property
    def builtin(self) -> bool:
        return self.kind == "builtin"

    def metadata(self) -> dict[str, str] | None:
        """The trace metadata's ``method_source`` (part of the trace identity); ``None`` for a
        built-in, whose identity is its name alone."""
        if self.builtin:
            return None
        if self.kind == "distribution":
            return {"kind": "distribution", "distribution": str(self.distribution), "version": str(self.version), "object": self.object}
        return {"kind": "file", "path": str(self.path), "sha256": str(self.sha256), "object": self.object}

    def describe(self) -> str:
        """One phrase naming the source, for messages and ``tempora-trace list``."""
        if self.builtin:
            return f"the built-in {self.object}"
        if self.kind == "distribution":
            return f"distribution {self.distribution} {self.version} ({self.object})"
        return f"file {self.path} ({self.object})"


@dataclass(frozen=True)
class MethodRef:
    """A method class resolved from a name or spec, with its provenance."""

    name: str
    cls: type[TTAMethod]
    source: MethodSource


# ------------------------------------------------------------------------ entry points
_ENTRY_POINTS: dict[str, list[Any]] | None = None


def entry_points() -> dict[str, list[Any]]:
    """Name → the ``tempora.methods`` entry points declaring it (read from the installed
    distributions' metadata, cached; nothing is imported)."""
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None:
        found: dict[str, list[Any]] = {}
        seen: set[tuple[str, str, str]] = set()
        for ep in find(group=ENTRY_POINT_GROUP):
            key = (ep.name, ep.value, _dist_name(ep))
            if key not in seen:  # one distribution seen twice on sys.path counts once
                seen.add(key)
                found.setdefault(ep.name, []).append(ep)
        _ENTRY_POINTS = found
    return _ENTRY_POINTS


def refresh_entry_points() -> None:
    """Forget the cached entry points (after installing a distribution in this process)."""
    global _ENTRY_POINTS
    _ENTRY_POINTS = None
    user_code.forget_distributions()
    importlib.invalidate_caches()


def _dist_name(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return str(dist.metadata["Name"]) if dist is not None else "?"


def _dist_version(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return str(dist.version) if dist is not None else "?"


def entry_point_source(ep: Any) -> MethodSource:
    return MethodSource("distribution", ep.value, distribution=_dist_name(ep), version=_dist_version(ep))


# ------------------------------------------------------------------------ provenance
# A method file is the user's code: it is loaded, and its digest taken, by the one loader of
# user code (tempora_trace.user_code); these names stay here for the registry's callers.
file_sha256 = user_code.file_sha256
code_sha256 = user_code.code_sha256


def class_source(cls: type) -> MethodSource:
    """Provenance of a class found by module: built-in, the distribution its module belongs
    to, or its module's file (path and SHA-256)."""
    module = cls.__module__
    obj = f"{module}:{cls.__qualname__}"
    if module == BUILTIN_PACKAGE or module.startswith(BUILTIN_PACKAGE + "."):
        return MethodSource("builtin", obj)
    dist = user_code.distribution_of(module)
    if dist is not None:
        return MethodSource("distribution", obj, distribution=dist[0], version=dist[1])
    file = getattr(sys.modules.get(module), "__file__", None)
    if file is not None and Path(file).is_file():
        path = Path(file).resolve()
        return MethodSource("file", cls.__qualname__, path=str(path), sha256=code_sha256(file_sha256(path), user_code.helpers(module)))
    # defined where there is no file (a notebook cell, exec): the class's own source text
    try:
        text = inspect.getsource(cls)
    except (OSError, TypeError):
        raise MethodError(f"method class {obj} has no source to record (define it in a module or a .py file)") from None
    return MethodSource("file", cls.__qualname__, path=f"<{module}>", sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())


# ------------------------------------------------------------------------ loading
def is_spec(text: str) -> bool:
    """``module:CLASS`` or ``PATH.py:CLASS`` (a registry name never holds a colon)."""
    return ":" in text


def _import_failed(what: str, exc: BaseException) -> MethodError:
    first = (str(exc).strip().splitlines() or [""])[0]
    error = MethodError(f"cannot import {what}: {type(exc).__name__}" + (f": {first}" if first else "") + " (--debug shows the traceback)")
    error.__cause__ = exc
    return error


def _load_file(path_text: str) -> tuple[Any, MethodSource]:
    try:
        loaded = user_code.load_file(path_text)
    except FileNotFoundError:
        raise MethodError(f"method file {path_text} not found") from None
    except IsADirectoryError:
        raise MethodError(f"method file {path_text} is not a file") from None
    except user_code.NotPythonError:
        raise MethodError(f"method file {path_text} cannot be imported as Python (name it *.py)") from None
    except user_code.UserImportError as failed:
        raise _import_failed(f"method file {path_text}", failed.cause) from failed.cause
    return loaded.module, MethodSource("file", "", path=str(loaded.path), sha256=loaded.sha256)


def _load_module(module_name: str) -> Any:
    try:
        return user_code.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            error = MethodError(f"no module named '{module_name}' (is it installed, or on PYTHONPATH? a file is PATH.py:CLASS)")
            error.__cause__ = exc
            raise error from exc
        raise _import_failed(f"method module '{module_name}'", exc) from exc
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from the user's module is an error like any other
        raise _import_failed(f"method module '{module_name}'", exc) from exc


def _method_classes(module: Any) -> list[str]:
    return sorted(
        n
        for n, v in vars(module).items()
        if inspect.isclass(v) and issubclass(v, TTAMethod) and getattr(v, "__module__", None) == module.__name__
    )


def _take_class(module: Any, attr: str, spec: str) -> type[TTAMethod]:
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = _method_classes(module)
            hint = f"; method classes there: {', '.join(found)}" if found else "; it defines no TTAMethod subclass"
            raise MethodError(
                f"{spec}: no class '{attr}' in {module.__name__ if not hasattr(module, '__file__') else module.__file__}{hint}"
            )
        obj = getattr(obj, part)
    check_method_class(obj, spec)
    return obj


def check_method_class(obj: Any, where: str) -> None:
    """A usable method class: a concrete TTAMethod subclass with a valid ``name``."""
    if not (inspect.isclass(obj) and issubclass(obj, TTAMethod)):
        kind = "a class" if inspect.isclass(obj) else type(obj).__name__
        raise MethodError(f"{where} is not a method: {kind}, not a subclass of tempora_trace.methods.TTAMethod")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise MethodError(f"{where}: class {obj.__name__} does not implement {missing}")
    name = obj.name
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise MethodError(f"{where}: class {obj.__name__} needs a class attribute `name` of letters, digits and . _ + - (got {name!r})")


def load_spec(spec: str) -> MethodRef:
    """The class of ``package.module:CLASS`` or ``PATH.py:CLASS``, with its provenance."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise MethodError(f"method spec '{spec}' must be MODULE:CLASS or PATH.py:CLASS")
    if target.endswith(".py") or "/" in target or "\\" in target:
        module, file_source = _load_file(target)
        cls = _take_class(module, attr, spec)
        source = MethodSource("file", attr, path=file_source.path, sha256=file_source.sha256)
        # a file inside an installed distribution is that distribution's method
        if cls.__module__ != module.__name__:
            source = class_source(cls)
    else:
        module = _load_module(target)
        cls = _take_class(module, attr, spec)
        source = class_source(cls)
    return MethodRef(cls.name, cls, source)


def load_entry_point(ep: Any) -> MethodRef:
    """Import the class an entry point names and check it (name included)."""
    where = f"entry point '{ep.name}' of distribution {_dist_name(ep)} {_dist_version(ep)} ({ep.value})"
    try:
        with user_code.user_import(ep.module):
            module = importlib.import_module(ep.module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from the plugin's module is an error like any other
        raise _import_failed(f"method module '{ep.module}' ({where})", exc) from exc
    obj: Any = module
    for part in (ep.attr or "").split("."):
        if not part or not hasattr(obj, part):
            raise MethodError(f"{where}: module {ep.module} has no attribute '{ep.attr}'")
        obj = getattr(obj, part)
    check_method_class(obj, where)
    if obj.name != ep.name:
        raise MethodError(f"{where} loads class {obj.__name__} named '{obj.name}': the entry-point name and the class's `name` must agree")
    return MethodRef(ep.name, obj, entry_point_source(ep))
