"""Pieces shared by the gradient-based methods (ETA, SAR, SHOT-IM and their variants).

- ``default_lr``: the published SGD learning rate per architecture family (batch 64).
- ``require_norm``: the one-line refusal naming the compatible built-in models.
- ``GradientMethod``: the construction hooks every gradient method shares and the honest
  prediction boundary for "forward, then learn from that forward" methods. ``predict`` runs the forward pass with autograd recording and returns
  detached logits; ``adapt`` computes the loss from the kept graph, back-propagates and steps.
  Nothing the method learns from a batch can influence that batch's prediction, which is
  exactly the predict-then-adapt order the papers evaluate.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, ClassVar

import torch
import torch.nn as nn

from ..norms import NORM_NAMES, compatible_models
from .base import (
    AS_DEFAULT,
    Departure,
    MethodContext,
    MethodError,
    TTAMethod,
    configure_batchnorm,
    named_norm_affine_params,
    no_stat_tracking,
    norm_kind,
)

__all__ = [
    "TRACKED_BN_STATISTICS",
    "GradientMethod",
    "auxiliary_view_statistics",
    "check_param_types",
    "check_params",
    "default_lr",
    "dense_nchw",
    "incompatibility_message",
    "is_vit",
    "reference_top_layer",
    "require_norm",
    "selected",
]

#: Shared departure: BN buffers keep tracking the target stream so frozen inference is possible.
TRACKED_BN_STATISTICS = Departure(
    point="BatchNorm running statistics",
    default="tracked over the target stream (momentum 0.1) while normalising with batch statistics",
    reference=AS_DEFAULT,
    authors="stop tracking and delete the buffers (batch statistics only)",
    reason="frozen inference (docs/design/design.md §5) needs valid running statistics at every checkpoint",
)


def auxiliary_view_statistics(view: str) -> Departure:
    """Shared departure: an auxiliary forward (``view``) does not move the tracked BN buffers."""
    return Departure(
        point=f"BatchNorm buffers during the {view}",
        default="left alone (train-mode BN uses the view's batch statistics, the running buffers do not move)",
        reference="moved: the view runs in train mode like the clean pass, a second buffer update per adapted batch",
        authors="nothing to move (running statistics are not tracked)",
        reason="the buffers frozen inference uses should describe the clean target stream, not a perturbed or filtered copy of it",
    )


def is_vit(context: MethodContext) -> bool:
    return "vit" in context.model_name.lower() or context.norm_kind == "ln"


_REFERENCE_TOP_BLOCKS = {"9", "10", "11"}


def reference_top_layer(name: str) -> bool:
    """The Tempora reference's "top of the network" (DeYO; SAR under ``profile=paper``): a module
    named ``layer4`` (ResNet-50), ``blocks.9``-``blocks.11`` or ``norm`` (ViT-B/16), matched on
    whole name components so that it also holds inside wrappers (``net.blocks.9``, ``net.norm``)."""
    parts = name.split(".")
    if "layer4" in parts or "norm" in parts:
        return True
    return any(a == "blocks" and b in _REFERENCE_TOP_BLOCKS for a, b in zip(parts, parts[1:]))


def dense_nchw(x: torch.Tensor) -> torch.Tensor:
    """``x`` in the default (NCHW-contiguous) memory layout; the same tensor when it already is,
    as every batch from the tracer's loaders is.

    A batch permuted from NHWC storage (``torch.from_numpy(hwc).permute(0, 3, 1, 2)``) is
    channels-last strided, which sends convolution and GroupNorm through their channels-last
    CPU kernels, backward included. On torch 2.11.0 (CPU) ZeroSIAM's projector-view backward
    on demo-resnet-gn died with a segmentation fault on exactly such batches; it did not
    reproduce with torch 2.14.1, and the channels-last GroupNorm backward has a history of
    edge cases (pytorch/pytorch#115940). Gradient methods therefore learn from dense NCHW
    batches only: the values are the same, only the memory layout differs."""
    return x if x.is_contiguous() else x.contiguous()


def selected(mask: torch.Tensor) -> torch.Tensor:
    """Indices of the True entries of a 1-D mask. The one host synchronisation a sample filter
    needs (what follows has a data-dependent size); gather with ``index_select`` afterwards
    instead of indexing with the mask again, which would synchronise once per indexing."""
    return mask.nonzero().squeeze(1)


def default_lr(context: MethodContext) -> float:
    """SGD learning rate of the Tent family at batch 64: 0.00025 for ResNets (Tent, EATA, SAR,
    and SHOT-IM as the Tempora paper runs it), 0.001 for ViT-B/16 (SAR's ViT setting)."""
    return 0.001 if is_vit(context) else 0.00025


def require_norm(method: type[TTAMethod] | TTAMethod, model: nn.Module) -> str:
    """The model's normalisation kind, or a one-line MethodError naming compatible models."""
    kind = norm_kind(model)
    if kind in method.compatible_norms:
        return kind  # type: ignore[return-value]
    raise MethodError(incompatibility_message(method, NORM_NAMES[kind]))


def incompatibility_message(method: type[TTAMethod] | TTAMethod, found: str) -> str:
    """One line: what the method needs, what it got, and which built-in models fit."""
    wanted = " or ".join(NORM_NAMES[k] for k in sorted(method.compatible_norms))
    models = ", ".join(compatible_models(method.compatible_norms))
    return f"method '{method.name}' needs {wanted} layers but {found}; compatible built-in models: {models}"


def check_param_types(name: str, defaults: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with each value checked against its default's type (a float option accepts any
    number and is returned as float, an int option only ints); unknown names and wrong types
    are a one-line MethodError. Shared by construction and a campaign's check at load."""
    unknown = sorted(set(params) - set(defaults) - {"profile"})
    if unknown:
        raise MethodError(f"method '{name}' has no option(s) {unknown}; known: {sorted(set(defaults) | {'profile'})}")
    out = dict(params)
    for key, value in params.items():
        default = defaults.get(key)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok:
                out[key] = float(value)
        elif isinstance(default, str):
            ok = isinstance(value, str)
        else:
            ok = True
        if not ok:
            raise MethodError(f"method '{name}': option {key} must be a {type(default).__name__}, not {value!r}")
    return out


def check_params(
    method: TTAMethod,
    non_negative: tuple[str, ...] = (),
    fractions: tuple[str, ...] = (),
    positive_ints: tuple[str, ...] = (),
) -> None:
    """Reject user-supplied options of the wrong type or range with a one-line MethodError
    (``--param lr=abc`` must not become a traceback deep inside torch). Types follow the
    defaults: a float option accepts any number (stored as float), an int option only ints."""
    method.params.update(check_param_types(method.name, method.default_params(method.context), method.params))
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

    Construction runs the steps every gradient method repeats, each a hook a method may
    override, so that a new method is usually its ``loss`` and little else:

    1. option checks: ``check_params`` with the ranges named in ``non_negative_options``,
       ``fraction_options`` and ``positive_int_options``, then ``validate()``;
    2. the model must have a compatible normalisation kind (``compatible_norms``);
    3. ``prepare(model)``: build method-owned modules (projectors, learnable augmentations);
    4. ``configure_norms(model)``: BatchNorm on batch statistics, source buffers discarded or
       kept (option ``source_stats``), target statistics tracked for frozen mode (docs/design/design.md §5);
    5. ``choose_parameters(model)``: the ``(name, parameter)`` pairs to adapt (default: the
       affine parameters of every normalisation layer); only they require gradients;
    6. ``build_optimizer(params)``: SGD with the options ``lr`` and ``momentum``.

    Each batch: ``predict`` runs the forward with autograd recording and returns detached
    logits; ``adapt`` calls the update hook ``update(x, logits)``, which by default
    back-propagates ``loss(x, logits)`` and steps (``None`` means "nothing to learn from this
    batch") and returns whether the batch changed state that later predictions depend on
    (``updated``). A sparse policy's skipped batch calls ``skip_adapt()`` instead of ``adapt()``. Nothing
    learnt from a batch can influence that batch's prediction, the predict-then-adapt order
    the papers evaluate. ``frozen`` predictions run under ``no_grad`` with BatchNorm in eval
    mode on its running buffers (docs/design/design.md §5).
    """

    family = "gradient-based"
    #: ``source_stats`` default: ``discard`` (reset BN buffers, as the Tent family does) or ``keep``.
    default_source_stats: ClassVar[str] = "discard"
    #: options checked to be >= 0, in [0, 1], and integers >= 1 (when the method has them).
    non_negative_options: ClassVar[tuple[str, ...]] = ("lr",)
    fraction_options: ClassVar[tuple[str, ...]] = ("momentum", "bn_momentum")
    positive_int_options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        """The Tent family's published SGD setting (batch 64) and BN handling."""
        return {"lr": default_lr(context), "momentum": 0.9, "source_stats": cls.default_source_stats, "bn_momentum": 0.1}

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        #: (input, logits with graph) of the last unfrozen ``predict``, consumed by ``adapt``.
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None
        present = set(self.params)
        check_params(
            self,
            non_negative=tuple(k for k in self.non_negative_options if k in present),
            fractions=tuple(k for k in self.fraction_options if k in present),
            positive_ints=tuple(k for k in self.positive_int_options if k in present),
        )
        self.validate()
        require_norm(self, model)
        model.eval()
        self.prepare(model)
        #: the BatchNorm layers that run on batch statistics while adapting (eval when frozen).
        self.bn_layers = self.configure_norms(model)
        self.set_train_modules(self.bn_layers)
        #: ``(name, parameter)`` of everything the optimiser updates in the model.
        self.adapted = self.choose_parameters(model)
        if not self.adapted:
            raise MethodError(f"method '{self.name}' found no parameters to adapt in this model")
        model.requires_grad_(False)
        for _, p in self.adapted:
            p.requires_grad_(True)
        self.optimizer = self.build_optimizer([p for _, p in self.adapted])

    # ------------------------------------------------------------------ hooks
    def validate(self) -> None:
        """Cross-option checks beyond the declared ranges (raise MethodError)."""

    def prepare(self, model: nn.Module) -> None:
        """Build method-owned modules before parameters and optimiser are chosen."""

    def configure_norms(self, model: nn.Module) -> list[nn.Module]:
        """Normalisation set-up; returns the modules toggled by freeze/unfreeze."""
        return configure_batchnorm(model, self.params.get("source_stats", "discard"), self.params.get("bn_momentum", 0.1))

    def choose_parameters(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        """What to adapt: by default the affine parameters of every normalisation layer."""
        return named_norm_affine_params(model)

    def build_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        """The published SGD over ``params``."""
        # foreach: one call over the parameter list (on CUDA the default already; on a CPU the
        # same per-tensor arithmetic, bit for bit, without the per-parameter Python loop)
        return torch.optim.SGD(params, lr=self.params["lr"], momentum=self.params["momentum"], foreach=True)

    def loss(self, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | None:
        """The objective for the batch ``x`` whose forward gave ``logits`` (graph attached);
        ``None`` when the batch gives nothing to learn (no step is taken)."""
        raise NotImplementedError(f"{type(self).__name__} must implement loss() or update()")

    # ------------------------------------------------------------ the two phases
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self._pending = None
        self.last_updated = False
        x = dense_nchw(x)
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
            self.last_updated = bool(self.update(*pending))

    def update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        """The update hook: learn from the batch ``x`` whose forward gave ``logits`` (graph
        attached), in ``adapt`` and so inside ℓ. Returns ``updated``: True when the batch changed
        state that later predictions depend on (here: a step was taken). Override it when one
        loss and one step are not enough."""
        loss = self.loss(x, logits)
        if loss is None:
            return False
        self._step(loss)
        return True

    def _update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        """Deprecated name of :meth:`update` (kept for methods written against it)."""
        return GradientMethod.update(self, x, logits)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("_update")
        if own is not None and "update" not in cls.__dict__:
            # a method written against the old private hook keeps working, with a warning
            warnings.warn(f"{cls.__qualname__}._update is deprecated: name the update hook `update`", DeprecationWarning, stacklevel=2)
            cls.update = own  # type: ignore[method-assign]

    def _step(self, loss: torch.Tensor) -> None:
        assert self.optimizer is not None
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def warm_auxiliary_sizes(self, x: torch.Tensor, view: Callable[[torch.Tensor], torch.Tensor], backward: bool) -> None:
        """:meth:`warm_up_shapes` for a method whose auxiliary forward runs on ``view`` of a
        data-dependent subset of the batch: that forward (and its backward, where the loss
        flows through it) once at every size 1..len(x). On an H100 the first ResNet-50 pass
        at a new size costs about 100 ms more than the next (CMF: events of 140–250 ms
        against 60 ms, at the first few dozen batches of a process only). No step is taken."""
        x = x.detach()
        for k in range(1, x.shape[0] + 1):
            with torch.enable_grad() if backward else torch.no_grad():
                out = self.auxiliary_forward(view(x[:k]))
                if backward:
                    out.float().logsumexp(1).sum().backward()
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)

    def auxiliary_forward(self, x: torch.Tensor) -> torch.Tensor:
        """A forward pass that is not the prediction (an augmented, shuffled or perturbed view).

        By default it leaves the tracked BatchNorm running statistics alone: frozen inference
        should see statistics of the clean stream only (docs/design/design.md §5). ``profile=paper``
        reproduces the Tempora reference quirk: the view runs in train mode like the clean
        pass, so it moves the BN buffers (a second update per adapted batch)."""
        if self.paper_profile or not self.bn_layers:
            return self.model(x)
        with no_stat_tracking(self.bn_layers):
            return self.model(x)

    def skip_adapt(self) -> None:
        self._pending = None  # the prediction's graph goes now, not inside the next event
        super().skip_adapt()

    def freeze(self) -> None:
        self._pending = None
        super().freeze()

    def restore(self, snap: dict[str, Any]) -> None:
        self._pending = None
        super().restore(snap)
