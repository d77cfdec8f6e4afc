"""Pieces shared by the gradient-based methods (ETA, SAR, SHOT-IM and their variants).

- ``default_lr``: the published SGD learning rate per architecture family (batch 64).
- ``require_norm``: the one-line refusal naming the compatible built-in models.
- ``GradientMethod``: the honest prediction boundary for "forward, then learn from that
  forward" methods. ``predict`` runs the forward pass with autograd recording and returns
  detached logits; ``adapt`` computes the loss from the kept graph, back-propagates and steps.
  Nothing the method learns from a batch can influence that batch's prediction, which is
  exactly the predict-then-adapt order the papers evaluate.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
import torch.nn as nn

from .base import MethodContext, MethodError, TTAMethod, norm_kind

NORM_NAMES = {"bn": "BatchNorm", "gn": "GroupNorm", "ln": "LayerNorm", None: "no normalisation layers"}


def is_vit(context: MethodContext) -> bool:
    return "vit" in context.model_name.lower() or context.norm_kind == "ln"


def default_lr(context: MethodContext) -> float:
    """SGD learning rate of the Tent family at batch 64: 0.00025 for ResNets (Tent, EATA, SAR,
    and SHOT-IM as the Tempora paper runs it), 0.001 for ViT-B/16 (SAR's ViT setting)."""
    return 0.001 if is_vit(context) else 0.00025


def require_norm(method: type[TTAMethod] | TTAMethod, model: nn.Module) -> str:
    """The model's normalisation kind, or a one-line MethodError naming compatible models."""
    kind = norm_kind(model)
    if kind in method.compatible_norms:
        return kind  # type: ignore[return-value]
    wanted = sorted(method.compatible_norms)
    raise MethodError(incompatibility_message(method, NORM_NAMES[kind]))


def incompatibility_message(method: type[TTAMethod] | TTAMethod, found: str) -> str:
    """One line: what the method needs, what it got, and which built-in models fit."""
    from ..models import compatible_models  # lazy: the model zoo is not needed to build a method

    wanted = " or ".join(NORM_NAMES[k] for k in sorted(method.compatible_norms))
    models = ", ".join(compatible_models(method.compatible_norms))
    return f"method '{method.name}' needs {wanted} layers but {found}; compatible built-in models: {models}"


def check_params(
    method: TTAMethod,
    non_negative: tuple[str, ...] = (),
    fractions: tuple[str, ...] = (),
    positive_ints: tuple[str, ...] = (),
) -> None:
    """Reject user-supplied options of the wrong type or range with a one-line MethodError
    (``--param lr=abc`` must not become a traceback deep inside torch). Types follow the
    defaults: a float option accepts any number (stored as float), an int option only ints."""
    defaults = method.default_params(method.context)
    for key, value in method.params.items():
        default = defaults.get(key)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok:
                method.params[key] = float(value)
        elif isinstance(default, str):
            ok = isinstance(value, str)
        else:
            ok = True
        if not ok:
            raise MethodError(f"method '{method.name}': option {key} must be a {type(default).__name__}, not {value!r}")
    for key in non_negative:
        if method.params[key] < 0:
            raise MethodError(f"method '{method.name}': option {key} must be >= 0, not {method.params[key]!r}")
    for key in fractions:
        if not 0 <= method.params[key] <= 1:
            raise MethodError(f"method '{method.name}': option {key} must be in [0, 1], not {method.params[key]!r}")
    for key in positive_ints:
        if method.params[key] < 1:
            raise MethodError(f"method '{method.name}': option {key} must be >= 1, not {method.params[key]!r}")


class GradientMethod(TTAMethod):
    """Base for methods that learn from the forward pass that produced the prediction.

    Subclasses build their optimiser in ``__init__`` (through ``_build_sgd``) and implement
    ``_update(x, logits) -> bool`` (True when parameters changed). ``frozen`` predictions run
    under ``no_grad`` with BatchNorm in eval mode on its running buffers (docs/design.md §5).
    """

    family = "gradient-based"

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        #: (input, logits with graph) of the last unfrozen ``predict``, consumed by ``adapt``.
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None

    def _build_sgd(self, params: list[nn.Parameter]) -> torch.optim.SGD:
        """Mark ``params`` (and only they) as trainable and build the published SGD."""
        self.model.requires_grad_(False)
        for p in params:
            p.requires_grad_(True)
        return torch.optim.SGD(params, lr=self.params["lr"], momentum=self.params["momentum"])

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self._pending = None
        self.last_updated = False
        if self.frozen:
            with torch.no_grad():
                return self.model(x)
        with torch.enable_grad():
            logits = self.model(x)
        self._pending = (x, logits)
        return logits.detach()

    def adapt(self) -> None:
        pending, self._pending = self._pending, None
        if self.frozen or pending is None:
            self.last_updated = False
            return
        with torch.enable_grad():
            self.last_updated = bool(self._update(*pending))

    @abstractmethod
    def _update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        """Learn from the batch ``x`` whose forward gave ``logits`` (graph attached)."""

    def _step(self, loss: torch.Tensor) -> None:
        assert self.optimizer is not None
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def freeze(self) -> None:
        self._pending = None
        super().freeze()

    def restore(self, snap: dict[str, Any]) -> None:
        self._pending = None
        super().restore(snap)
