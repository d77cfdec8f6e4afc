"""Modules a method needs when it runs, imported when it is built rather than when its module is.

torchvision's transforms cost a process about 2 s of CPU to import (its operators import
``torch._dynamo``), and only the methods that draw augmented views call them. Importing every
method module (``tempora-trace list``, resolving a name, the documentation's tables) must not pay
for that; a run of such a method must pay it before its clock starts, never inside a timed
event. So the method modules that call torchvision name it with :func:`lazy_module`, and
whoever builds a method to run it (the tracer, the live runner, the conformance kit) calls
:func:`load_pending` first: every lazy module that an imported method module declared is
imported there, outside every timed region.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from .base import MethodError

__all__ = ["LazyModule", "lazy_module", "load_pending"]

_DECLARED: list[LazyModule] = []


class LazyModule:
    """Stands for module ``name`` in ``owner``'s namespace (as ``binding``) until it is
    loaded; loading binds the real module there, so later calls reach it directly."""

    def __init__(self, name: str, owner: dict[str, Any], binding: str):
        self.name, self._owner, self._binding = name, owner, binding
        self.module: ModuleType | None = None

    def load(self) -> ModuleType:
        """The module, imported now if it was not; a module that does not import is a
        one-line :class:`~tempora_trace.methods.base.MethodError` naming who declared it."""
        if self.module is None:
            try:
                module = importlib.import_module(self.name)
            except Exception as exc:  # a missing library, or one that fails while importing
                if self in _DECLARED:  # refused once; other methods' runs in this process go on
                    _DECLARED.remove(self)
                owner = self._owner.get("__file__") or self._owner.get("__name__", "a method module")
                raise MethodError(f"{owner} needs module '{self.name}' (lazy_module), which does not import: {exc}") from exc
            self.module = module
            self._owner[self._binding] = module
        return self.module

    def __getattr__(self, attr: str) -> Any:  # a call outside a run (a user's own script) loads it on first use
        return getattr(self.load(), attr)


def lazy_module(name: str, owner: dict[str, Any], binding: str) -> LazyModule:
    """Declare module ``name`` as ``owner[binding]`` (pass the declaring module's ``globals()``)."""
    lazy = LazyModule(name, owner, binding)
    _DECLARED.append(lazy)
    return lazy


def load_pending() -> list[str]:
    """Import every declared module not loaded yet; the names imported now."""
    loaded = []
    for lazy in _DECLARED:
        if lazy.module is None:
            lazy.load()
            loaded.append(lazy.name)
    return loaded
