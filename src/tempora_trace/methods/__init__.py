"""Registry of TTA methods by name.

Each method is one module in this package that defines a :class:`TTAMethod` subclass
(usually a :class:`GradientMethod`) decorated with :func:`register`. Modules are discovered
automatically, so adding a method is adding one file (docs/add-a-method.md).
"""

from __future__ import annotations

import importlib
import pkgutil

from ._common import GradientMethod
from .base import AS_DEFAULT, Departure, MethodContext, MethodError, TTAMethod, entropy_margin, softmax_entropy

_REGISTRY: dict[str, type[TTAMethod]] = {}
_DISCOVERED = False


def register(cls: type[TTAMethod]) -> type[TTAMethod]:
    """Class decorator: make a method available under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise TypeError(f"method name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    for info in pkgutil.iter_modules(__path__):
        if info.name not in ("base",) and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    _DISCOVERED = True


def available_methods() -> list[str]:
    _discover()
    return sorted(_REGISTRY)


def get_method(name: str) -> type[TTAMethod]:
    """The method class registered as ``name``; MethodError naming the known ones otherwise."""
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise MethodError(f"unknown method '{name}'; available: {', '.join(sorted(_REGISTRY))}") from None


def methods_for_model(model: str) -> list[str]:
    """Methods whose normalisation needs the built-in ``model`` meets (no model is built)."""
    from ..errors import ConfigError
    from ..models import MODEL_NORMS

    if model not in MODEL_NORMS:
        raise ConfigError(f"unknown model '{model}'; available: {', '.join(MODEL_NORMS)}")
    return [m for m in available_methods() if MODEL_NORMS[model] in get_method(m).compatible_norms]


def departures_markdown() -> str:
    """Markdown tables of every method's departures from the Tempora reference and the authors'
    code (the methods documentation renders these; see ``_parity``)."""
    from ._parity import departures_markdown as render

    return render()


__all__ = [
    "AS_DEFAULT",
    "Departure",
    "GradientMethod",
    "MethodContext",
    "MethodError",
    "TTAMethod",
    "available_methods",
    "departures_markdown",
    "entropy_margin",
    "get_method",
    "methods_for_model",
    "register",
    "softmax_entropy",
]
