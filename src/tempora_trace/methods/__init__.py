"""TTA methods: the public API for writing one, and the registry that finds them by name.

A method is one :class:`TTAMethod` subclass (usually a :class:`GradientMethod`). Tempora finds
it in one of three ways (docs/guide/add-a-method.md):

- built in: a module of this package whose class is decorated with :func:`register`;
- installed: a distribution declares an entry point in the group ``tempora.methods``
  (``my-method = "my_pkg.module:MyMethod"``); listed without importing, imported when asked for;
- named directly: ``package.module:CLASS`` or ``PATH.py:CLASS`` wherever a method name goes.

Everything a method author needs is importable from here: the base classes, the helpers for
auxiliary forwards and the shape warm-up (methods of :class:`GradientMethod`), the
teacher–student base :class:`TeacherStudentMethod` (EMA teacher, anchor, stochastic restore), the
snapshot-safe random generator :class:`MethodRNG`, and the conformance kit
(:mod:`tempora_trace.methods.testing`).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

from ..errors import ConfigError
from ..models import MODEL_NORMS, model_norms
from ..models.external import is_external
from ..norms import method_fits
from . import _registry
from ._registry import ENTRY_POINT_GROUP, MethodRef, MethodSource, entry_points, refresh_entry_points
from .base import (
    AS_DEFAULT,
    Departure,
    MethodContext,
    MethodError,
    TTAMethod,
    configure_batchnorm,
    entropy_margin,
    named_norm_affine_params,
    no_stat_tracking,
    norm_affine_params,
    softmax_entropy,
)
from .gradient import GradientMethod, check_params, default_lr, dense_nchw, selected
from .rng import MethodRNG
from .teacher import TeacherStudentMethod, ema_update, stochastic_restore

_REGISTRY: dict[str, type[TTAMethod]] = {}
_DISCOVERED = False
#: Modules of this package that hold no method (the API, the registry, the kit).
_SUPPORT_MODULES = frozenset({"base", "gradient", "augment", "lazy_imports", "rng", "teacher", "testing"})


def register(cls: type[TTAMethod]) -> type[TTAMethod]:
    """Class decorator: make a method available under ``cls.name`` in this process.

    The built-ins use it; a method outside the package is found through its entry point or
    its ``module:CLASS`` / ``PATH.py:CLASS`` spec instead (importing a module that uses it also
    works, for code that calls :func:`tempora_trace.runner.trace_run` itself)."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    known = _REGISTRY.get(cls.name)
    # the same class defined again (a module executed twice) replaces itself; another one clashes
    if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
        raise MethodError(
            f"method name '{cls.name}' is defined twice: by {_registry.class_source(known).describe()} "
            f"and by {_registry.class_source(cls).describe()}; rename one"
        )
    _REGISTRY[cls.name] = cls
    return cls


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _SUPPORT_MODULES and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    _DISCOVERED = True


def _import_named_module(name: str) -> None:
    """Import the built-in module named like method ``name`` (``eta-no-reset`` → ``eta_no_reset``),
    if there is one: resolving a built-in name then imports that module alone, not every
    method (several import torchvision, about 1.5 s a process that ``standard`` never needs).
    A name without a module of its own is found by importing them all."""
    module = name.replace("-", "_")
    if name in _REGISTRY or module in _SUPPORT_MODULES or module.startswith("_") or not module.isidentifier():
        return
    if importlib.util.find_spec(f"{__name__}.{module}") is not None:
        importlib.import_module(f"{__name__}.{module}")


def builtin_methods() -> list[str]:
    """The methods this package ships (the documentation's tables list these)."""
    _discover()
    return sorted(n for n, cls in _REGISTRY.items() if _registry.class_source(cls).builtin)


def plugin_methods() -> dict[str, list[MethodSource]]:
    """Names declared by installed distributions (entry-point group ``tempora.methods``) →
    their sources, read from the distributions' metadata without importing any of them."""
    return {name: [_registry.entry_point_source(ep) for ep in eps] for name, eps in sorted(entry_points().items())}


def available_methods() -> list[str]:
    """Every method name: built in, registered in this process, or declared by an installed
    distribution (plugins are listed, not imported)."""
    _discover()
    return sorted(set(_REGISTRY) | set(entry_points()))


def method_clashes() -> list[str]:
    """One line per name that two sources claim (a plugin named like a built-in, two plugins
    with one name); empty when every name is unambiguous."""
    _discover()
    lines = []
    for name, eps in sorted(entry_points().items()):
        sources = [_registry.class_source(_REGISTRY[name]).describe()] if name in _REGISTRY else []
        sources += sorted(_registry.entry_point_source(ep).describe() for ep in eps)
        if len(sources) > 1:
            lines.append(_clash_line(name, sources))
    return lines


def _clash_line(name: str, sources: list[str]) -> str:
    return f"method name '{name}' is claimed by {' and by '.join(sources)}; uninstall or rename one"


def resolve_method(spec: str) -> MethodRef:
    """The method a name or spec stands for, with its provenance.

    ``spec``: a registry name (built-in, registered, or an installed distribution's entry
    point), ``package.module:CLASS`` or ``PATH.py:CLASS``. One-line :class:`MethodError` for an
    unknown name, a module that does not import (the exception chained, for ``--debug``), a
    missing class, a class that is not a method, and a name two sources claim."""
    if not isinstance(spec, str) or not spec.strip():
        raise MethodError(f"method must be a name, MODULE:CLASS or PATH.py:CLASS, not {spec!r}")
    spec = spec.strip()
    if _registry.is_spec(spec):
        _discover()  # a class of the user's named like a built-in is a clash: every built-in must be known
        ref = _registry.load_spec(spec)
        clash = []
        known = _REGISTRY.get(ref.name)
        if known is not None and known is not ref.cls:
            clash.append(_registry.class_source(known).describe())
        clash += [_registry.entry_point_source(ep).describe() for ep in entry_points().get(ref.name, []) if ep.value != ref.source.object]
        if clash:
            raise MethodError(_clash_line(ref.name, [*clash, ref.source.describe()]))
        return ref
    _import_named_module(spec)
    if spec not in _REGISTRY:
        _discover()
    eps = entry_points().get(spec, [])
    known = _REGISTRY.get(spec)
    if known is not None and not eps:
        return MethodRef(spec, known, _registry.class_source(known))
    if not eps:
        raise MethodError(f"unknown method '{spec}'; available: {', '.join(available_methods())} (or MODULE:CLASS, PATH.py:CLASS)")
    sources = [_registry.class_source(known).describe()] if known is not None else []
    if known is None or not _registry.class_source(known).builtin:
        refs = [_registry.load_entry_point(ep) for ep in eps]
        distinct = {ref.cls for ref in refs} | ({known} if known is not None else set())
        if len(distinct) == 1 and len({(r.source.distribution, r.source.version) for r in refs}) == 1:
            return refs[0]
    raise MethodError(_clash_line(spec, sources + sorted(_registry.entry_point_source(ep).describe() for ep in eps)))


def get_method(name: str) -> type[TTAMethod]:
    """The method class ``name`` (or ``module:CLASS`` / ``PATH.py:CLASS``) stands for;
    one-line MethodError naming the known ones otherwise."""
    return resolve_method(name).cls


#: Built-ins from the field's benchmark code bases, beyond the paper's study. The committed demo
#: set and ``make demo`` leave them out (several cost many forward passes per batch);
#: ``tempora-trace list --methods-for MODEL --demo-set`` prints the others.
FIELD_METHODS = ("cotta", "rotta", "roid", "t3a", "memo", "eata")


def methods_for_model(model: str, input_size: int | None = None, unusable: list[str] | None = None) -> list[str]:
    """Methods that fit ``model``'s normalisation layers (:func:`tempora_trace.norms.method_fits`):
    a built-in's are known without building it; a model by spec (``timm:NAME``, a factory …)
    is built untrained, nothing downloaded. With ``unusable`` (a list), an installed plugin
    that does not load is left out and its one-line reason appended there instead of raised,
    so one broken plugin does not hide the methods that fit."""
    if model not in MODEL_NORMS and not is_external(model):
        raise ConfigError(
            f"unknown model '{model}'; available: {', '.join(MODEL_NORMS)}, or timm:NAME, torchvision:NAME, MODULE:FACTORY, PATH.py:FACTORY"
        )
    norms = model_norms(model, input_size)
    fits = []
    for name in available_methods():
        try:
            cls = get_method(name)
        except MethodError as exc:
            if unusable is None:
                raise
            unusable.append(str(exc))
            continue
        if method_fits(cls, norms):
            fits.append(name)
    return fits


def departures_markdown() -> str:
    """Markdown tables of every method's departures from the Tempora reference and the authors'
    code (the methods documentation renders these; see ``_parity``)."""
    from ._parity import departures_markdown as render  # lazy: _parity imports this package, and only the documentation build asks for it

    return render()


__all__ = [
    "AS_DEFAULT",
    "ENTRY_POINT_GROUP",
    "Departure",
    "GradientMethod",
    "MethodContext",
    "MethodError",
    "MethodRNG",
    "MethodRef",
    "MethodSource",
    "TTAMethod",
    "TeacherStudentMethod",
    "available_methods",
    "builtin_methods",
    "check_params",
    "configure_batchnorm",
    "default_lr",
    "dense_nchw",
    "ema_update",
    "departures_markdown",
    "entropy_margin",
    "get_method",
    "method_clashes",
    "methods_for_model",
    "named_norm_affine_params",
    "no_stat_tracking",
    "norm_affine_params",
    "plugin_methods",
    "refresh_entry_points",
    "register",
    "resolve_method",
    "selected",
    "softmax_entropy",
    "stochastic_restore",
]
