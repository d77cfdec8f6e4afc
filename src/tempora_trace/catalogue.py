"""What ``tempora-trace list`` prints: the methods, models and datasets this install offers,
the methods that fit one model, or one model's normalisation layers and its methods."""

from __future__ import annotations

from collections.abc import Iterator

from .data import DATASETS
from .errors import ConfigError
from .methods import FIELD_METHODS, builtin_methods, method_clashes, methods_for_model, plugin_methods
from .models import MODEL_NORMS, available_models, get_model
from .norms import describe_norms


def methods_for_line(model: str, demo_set: bool = False) -> str:
    """The methods that run on ``model``, space-separated (for scripts); with ``demo_set``,
    without the field's methods (:data:`tempora_trace.methods.FIELD_METHODS`)."""
    return " ".join(m for m in methods_for_model(model) if not (demo_set and m in FIELD_METHODS))


def model_lines(model: str, input_size: int | None = None) -> Iterator[str]:
    """``model``'s normalisation layers (a built-in's are known; a model by spec is built
    untrained, nothing downloaded), then the methods that fit it."""
    if model in MODEL_NORMS and input_size is None:
        norms, line = frozenset({MODEL_NORMS[model]}), f"model {model}: built-in"
    else:
        _, spec = get_model(model, "random", input_size=input_size)
        norms, line = spec.norms, f"model {spec.name}: {spec.num_classes} classes (untrained), input {spec.input_size} px"
    yield f"{line}, {describe_norms(norms)}"
    unusable: list[str] = []
    yield "methods: " + ", ".join(methods_for_model(model, input_size, unusable))
    for reason in unusable:  # an installed plugin that does not load is named, not fatal to the listing
        yield f"not listed: {reason}"


def catalogue_lines() -> Iterator[str]:
    """The built-in and installed methods, the models and the datasets; ConfigError first when
    two methods claim one name."""
    clashes = method_clashes()
    if clashes:
        raise ConfigError(clashes[0])
    yield "methods: " + ", ".join(builtin_methods())
    plugins = plugin_methods()
    if plugins:
        yield "plugin methods: " + ", ".join(f"{n} ({s[0].distribution} {s[0].version})" for n, s in plugins.items())
    yield "models:  " + ", ".join(available_models()) + "; or timm:NAME, torchvision:NAME[:WEIGHTS], MODULE:FACTORY, PATH.py:FACTORY"
    yield "datasets: " + ", ".join(f"{n} (default model {d.default_model})" for n, d in DATASETS.items()) + "; or folder:PATH"
