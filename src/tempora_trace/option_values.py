"""Values of trace options given as text: ``--param KEY=VALUE`` (JSON, finite, bounded
in depth), ``--domains`` and ``--corruptions`` lists. Apart from :mod:`.options`, the option
declarations, so that each stays short; the options module re-exports them."""

from __future__ import annotations

import json
import math
from typing import Any

from tempora_schema.errors import OptionError

#: Deepest nesting of a ``--param`` value (the trace identity and metadata hold it as JSON).
MAX_PARAM_DEPTH = 32


def _finite_json(value: Any, where: str) -> Any:
    """``--param`` values must be finite: NaN/∞ would collapse the model and break strict JSON;
    and nested at most :data:`MAX_PARAM_DEPTH` deep (a deeper one cannot be written back)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise OptionError(f"--param {where}: {item} is not a finite number")
        if isinstance(item, (list, dict)) and depth >= MAX_PARAM_DEPTH:
            raise OptionError(f"--param {where}: a value nested more than {MAX_PARAM_DEPTH} levels deep")
        if isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
    return value


def parse_param(pair: str) -> tuple[str, Any]:
    """``KEY=VALUE``: VALUE is JSON when it parses (numbers, true/false, lists), else a string."""
    if "=" not in pair:
        raise OptionError(f"--param expects KEY=VALUE, got '{pair}'")
    key, text = (s.strip() for s in pair.split("=", 1))
    if not key:
        raise OptionError(f"--param expects KEY=VALUE, got '{pair}'")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return key, text
    except RecursionError:
        raise OptionError(f"--param {key}: a value nested more than {MAX_PARAM_DEPTH} levels deep") from None
    if text.strip().lower().lstrip("+-") in ("nan", "infinity", "inf"):
        raise OptionError(f"--param {key}: {text} is not a finite number")
    return key, _finite_json(value, key)


def _names(text: str | None, option: str) -> list[str] | None:
    """Comma- or space-separated names; None stays None (the option not given)."""
    if text is None:
        return None
    items = [t.strip() for t in text.replace(" ", ",").split(",") if t.strip()]
    if not items:
        raise OptionError(f"{option}: empty list")
    return items


def parse_domains(text: str | None) -> list[str] | None:
    """``--domains``: names (None: the dataset's default)."""
    return _names(text, "--domains")


def parse_corruptions(text: str | None) -> list[str] | None:
    """``--corruptions``: names or groups (None: a folder as it is)."""
    return _names(text, "--corruptions")
