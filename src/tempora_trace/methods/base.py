"""The method interface every TTA method implements (docs/design/design.md §2).

The tracer owns the clock. It calls ``predict(x)`` and stops the intrinsic timer ``e_i`` when
logits come back, then calls ``adapt()`` and stops the extrinsic timer ``ℓ_i``. So a method puts
into ``predict`` exactly what must precede its output (forward pass, BN statistic updates,
filters that change the prediction) and into ``adapt`` everything after (backward, optimiser
step, EMA/Kalman updates, resets). Methods never synchronise the device or read the clock.

``updated`` (``last_updated``) means: this batch changed state that later predictions of the
adapting method depend on (parameters, a teacher, a memory bank or support set, a running
mean), not merely "changed parameters"; BatchNorm statistics tracked beside batch-statistics
normalisation only for frozen inference do not count. The amortised replay and the adaptation
rate read it, and the conformance kit checks it (``methods.testing.check_updated_flag``).

Frozen mode (docs/design/design.md §5) means: the adapted parameters, BatchNorm in eval mode on *valid*
running statistics, no parameter or buffer changes. Methods that discard source statistics
keep ``track_running_stats`` on after resetting the buffers, so PyTorch's own momentum update
(0.1 by default) tracks target-stream statistics during adaptation and frozen inference has
valid buffers at every checkpoint. The option ``source_stats`` chooses ``discard`` (the
reference behaviour of most methods) or ``keep`` (source buffers as the starting point).

Parity profiles: every method accepts the option ``profile``. ``default`` is the project's best
faithful implementation; ``paper`` makes the method behave as the Tempora reference code does
wherever the two differ, quirks included, so the paper's tables can be compared like for like.
Each method declares those differences as data (:class:`Departure`, the class attribute
``departures``); its docstring section and the documentation page are generated from them.
"""

from __future__ import annotations

import copy
import math
from abc import ABCMeta, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Iterator

import torch
import torch.nn as nn

from ..errors import ConfigError, TraceError
from ..models.heads import feature_head

# Normalisation families a model can be built on (methods declare which they support) live in
# the leaf module ``norms``, shared with the model registry; norm_kind is re-exported here.
from ..norms import BN_TYPES, NORM_KINDS, norm_kind  # noqa: F401

NORM_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.LayerNorm)


#: ``default``: the project's implementation; ``paper``: the Tempora reference's behaviour.
PROFILES = ("default", "paper")


class MethodError(TraceError, ValueError):
    """A method cannot be built as asked (unknown option, incompatible model)."""


#: Placeholder for a column of a departure that behaves as the default does.
AS_DEFAULT = "as default"


@dataclass(frozen=True)
class Departure:
    """One point where a method's default behaviour differs from the Tempora reference code
    (what ``profile=paper`` reproduces) and/or from the original authors' code.

    ``reference`` is ``AS_DEFAULT`` when only the authors' code differs (the paper profile
    changes nothing there); ``authors`` is ``AS_DEFAULT`` when the authors' code does what the
    default does, or names what it does otherwise."""

    point: str
    default: str
    reference: str
    reason: str
    authors: str = AS_DEFAULT

    @property
    def switched_by_paper_profile(self) -> bool:
        return self.reference != AS_DEFAULT


def departures_docstring(departures: tuple[Departure, ...]) -> str:
    """The docstring section a method class gets from its ``departures``."""
    lines = ["", "", "Departures (generated from ``departures``; ``profile=paper`` restores the reference):", ""]
    for d in departures:
        lines.append(
            f"- {d.point}: default {d.default}; Tempora reference {d.reference}"
            + (f"; original authors {d.authors}" if d.authors != AS_DEFAULT else "")
            + f". Why: {d.reason}"
        )
    return "\n".join(lines)


class _MethodMeta(ABCMeta):
    """Records the configured source state once ``__init__`` (the subclass's included) is done,
    so a method never has to remember to call ``_finish_setup`` itself."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__call__(*args, **kwargs)
        if obj._initial_state is None:
            obj._finish_setup()
        return obj


@dataclass(frozen=True)
class MethodContext:
    """What a method may need to know about the run to pick its published defaults.

    ``dataset_family`` is ``imagenet`` or ``cifar`` (the demo set counts as ``cifar``: 32×32,
    10 classes), the switch the papers use for dataset-dependent hyperparameters.

    ``source_images(n, batch_size)``, where the run has them, yields up to ``n`` clean images
    of the dataset (its ``clean`` split, in a fixed shuffled order) as float [0, 1] NCHW
    batches on the CPU, read only when called: the source samples a method may need before
    the stream starts (EATA's Fisher regulariser). ``None`` where the run has none to give.
    """

    num_classes: int
    dataset_family: str = "imagenet"
    batch_size: int = 64
    device: str = "cpu"
    model_name: str = ""
    norm_kind: str = "bn"
    source_images: Callable[[int, int], Iterator[torch.Tensor]] | None = field(default=None, compare=False, repr=False)


class TTAMethod(metaclass=_MethodMeta):
    """Base class: one online TTA method wrapped around a model.

    Subclasses set the class attributes, build their state in ``__init__`` (call
    ``super().__init__`` first), and implement ``predict``; ``adapt`` defaults to nothing. The
    configured source state, which ``reset()`` returns to, is recorded when construction ends
    (or earlier, where a subclass calls ``self._finish_setup()`` itself).
    """

    #: registry name, e.g. ``"tent"``.
    name: ClassVar[str] = ""
    #: ``baseline`` | ``gradient-free`` | ``gradient-based``.
    family: ClassVar[str] = "gradient-based"
    #: which normalisation families the method works with (see NORM_KINDS).
    compatible_norms: ClassVar[frozenset[str]] = frozenset(NORM_KINDS)
    #: True for a method that adapts no normalisation layer (it runs on any network, also one
    #: without normalisation layers or with several families of them).
    norm_free: ClassVar[bool] = False
    #: True for a method that learns from a batch before predicting it and leaves no trace of
    #: that learning once ``predict`` returns (MEMO's per-sample adaptation and reset): its
    #: backward pass belongs in ``e``, and the conformance kit checks that ``predict`` leaves
    #: every parameter and the optimiser as it found them instead of forbidding the backward.
    adapts_before_output: ClassVar[bool] = False
    #: one-line citation of the source paper, shown in the methods reference (docs/reference/methods.md).
    paper: ClassVar[str] = ""
    #: what the method updates, and where its overhead falls (the methods reference table).
    updates: ClassVar[str] = ""
    overhead: ClassVar[str] = ""
    #: where the default differs from the Tempora reference / the authors' code (see Departure).
    departures: ClassVar[tuple[Departure, ...]] = ()
    #: options the conformance kit (``check-method``) builds the method with unless ``--param``
    #: sets them, as scikit-learn's checks shorten an estimator's iterations: a smaller count of
    #: a per-event repetition (MEMO's and CoTTA's augmented views), so that the contract's checks
    #: run in seconds on a CPU. The code path is the default's; the kit names them on its first line.
    kit_params: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__doc__")
        if cls.departures and "Departures (generated" not in (own or ""):
            cls.__doc__ = (own or cls.paper or cls.__name__).rstrip() + departures_docstring(cls.departures)

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        self.model = model
        self.context = context
        self.params: dict[str, Any] = {}
        self.frozen = False
        self.optimizer: torch.optim.Optimizer | None = None
        #: set by ``predict``/``adapt``: did this batch change state that later predictions
        #: depend on (``updated`` in the trace)? Always False in frozen mode.
        self.last_updated = False
        self._train_modules: list[nn.Module] = []
        self._initial_state: Any = None
        known = self.all_params(context)
        unknown = set(params) - set(known)
        if unknown:
            raise MethodError(f"method '{self.name}' has no option(s) {sorted(unknown)}; known: {sorted(known)}")
        merged = dict(known)
        merged.update(params)
        if merged["profile"] not in PROFILES:
            raise MethodError(f"method '{self.name}': option profile must be one of {', '.join(PROFILES)}, not {merged['profile']!r}")
        self.params = merged

    # ----------------------------------------------------------------- defaults
    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        """Published defaults for this context (batch 64 unless the paper scales them)."""
        return {}

    @classmethod
    def all_params(cls, context: MethodContext) -> dict[str, Any]:
        """Every option the method accepts: its own defaults plus the common ``profile``."""
        return {**cls.default_params(context), "profile": "default"}

    @property
    def paper_profile(self) -> bool:
        """True when the method reproduces the Tempora reference code (``profile=paper``)."""
        return self.params.get("profile") == "paper"

    # ------------------------------------------------------------ the two phases
    @abstractmethod
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Everything before the prediction is emitted; returns logits (or log-probabilities)."""

    def adapt(self) -> None:
        """Everything after the prediction, before the pipeline can take the next batch."""
        return None

    def skip_adapt(self) -> None:
        """A sparse-adaptation policy leaves this batch unadapted (docs/design/design.md §11): let go
        of whatever ``predict`` kept for ``adapt`` (an autograd graph), learn nothing. Called
        outside the timed regions; the batch's ℓ is 0 and ``updated`` false."""
        self.last_updated = False

    # ------------------------------------------------------------ state control
    def _finish_setup(self) -> None:
        """Record the configured source state; ``reset()`` returns here."""
        self._initial_state = self.snapshot()

    def reset(self) -> None:
        """Back to the source state (episodic evaluation resets between domains)."""
        if self._initial_state is None:
            raise RuntimeError(f"{type(self).__name__} forgot to call _finish_setup()")
        self.restore(self._initial_state)
        self.unfreeze()

    def freeze(self) -> None:
        """Frozen inference: adapted parameters, eval-mode normalisation, nothing changes."""
        self.frozen = True
        for m in self._train_modules:
            m.train(False)

    def unfreeze(self) -> None:
        self.frozen = False
        for m in self._train_modules:
            m.train(True)

    def warm_up_shapes(self, x: torch.Tensor) -> None:
        """Untimed passes over the input shapes other than ``x``'s that ``adapt`` can meet on
        batches like ``x``. The runner calls it once before any timed event and then resets
        the method: a library's first pass at a new shape (cuDNN plans, oneDNN primitives)
        is a one-off cost of the process, and would otherwise land in whichever timed event
        first meets that shape. Default: nothing (every pass runs on the batch's own shape)."""

    def extra_state(self) -> dict[str, Any]:
        """Method-owned state beyond model and optimiser (EMAs, hidden models, counters)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if state:
            raise NotImplementedError(f"{type(self).__name__} must implement load_extra_state")

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of everything that determines future outputs (for frozen evaluation
        and reset); restoring it makes the adapt path bit-identical to never having left."""
        return {
            "model": copy.deepcopy(self.model.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None,
            "extra": copy.deepcopy(self.extra_state()),
        }

    def restore(self, snap: dict[str, Any]) -> None:
        self.model.load_state_dict(snap["model"], strict=True)
        if self.optimizer is not None and snap["optimizer"] is not None:
            self.optimizer.load_state_dict(copy.deepcopy(snap["optimizer"]))
        self.load_extra_state(copy.deepcopy(snap["extra"]))

    # ---------------------------------------------------------------- helpers
    def hparams(self) -> dict[str, Any]:
        """Every hyperparameter actually used, JSON-ready, for the trace metadata."""
        return {k: (v if isinstance(v, (int, float, str, bool, type(None), list)) else str(v)) for k, v in self.params.items()}

    def set_train_modules(self, modules: list[nn.Module]) -> None:
        """Declare the modules that run in train mode while adapting (eval when frozen)."""
        self._train_modules = list(modules)
        for m in self._train_modules:
            m.train(not self.frozen)


# ---------------------------------------------------------------------- helpers
def configure_batchnorm(model: nn.Module, source_stats: str = "discard", momentum: float = 0.1) -> list[nn.Module]:
    """Put every BatchNorm layer into train mode (batch statistics) with running-statistic
    tracking at ``momentum``; ``discard`` resets the source buffers first (docs/design/design.md §5).
    Returns the BN modules so the method can toggle them on freeze/unfreeze."""
    if source_stats not in ("discard", "keep"):
        raise MethodError(f"source_stats must be 'discard' or 'keep', not {source_stats!r}")
    bns = []
    for m in model.modules():
        if isinstance(m, BN_TYPES):
            m.track_running_stats = True
            m.momentum = momentum
            if m.running_mean is None:
                m.register_buffer("running_mean", torch.zeros(m.num_features, device=m.weight.device if m.weight is not None else None))
                m.register_buffer("running_var", torch.ones(m.num_features, device=m.weight.device if m.weight is not None else None))
                m.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
            if source_stats == "discard":
                m.reset_running_stats()
            m.train(True)
            bns.append(m)
    return bns


@contextmanager
def no_stat_tracking(modules: nn.Module | Iterable[nn.Module]) -> Iterator[None]:
    """Run auxiliary forwards (augmented or shuffled views) in train-mode BN without letting
    them move the tracked running statistics: only the clean stream should.

    Tracking is switched off for the duration (train-mode BN then normalises with the batch
    statistics exactly as before and leaves buffers and ``num_batches_tracked`` alone), which
    costs one attribute write per layer instead of a buffer update, a clone and a copy.
    ``modules`` is a model or the list of its BN layers (pass the list on hot paths)."""
    layers = modules.modules() if isinstance(modules, nn.Module) else modules
    switched = [m for m in layers if isinstance(m, BN_TYPES) and m.track_running_stats]
    for m in switched:
        m.track_running_stats = False
    try:
        yield
    finally:
        for m in switched:
            m.track_running_stats = True


def named_norm_affine_params(model: nn.Module, skip: Any = None) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` for the affine weight/bias of every normalisation layer, in module
    order (Tent-style parameter set); ``skip(module_name)`` leaves layers out."""
    params = []
    for mn, m in model.named_modules():
        if isinstance(m, NORM_TYPES) and not (skip is not None and skip(mn)):
            for pn in ("weight", "bias"):
                p = getattr(m, pn)
                if p is not None:
                    params.append((f"{mn}.{pn}" if mn else pn, p))
    return params


def norm_affine_params(model: nn.Module) -> list[nn.Parameter]:
    """The affine weight/bias of every normalisation layer (Tent-style parameter set)."""
    return [p for _, p in named_norm_affine_params(model)]


def classifier_head(model: nn.Module, label: str | None = None) -> nn.Linear:
    """The model's final linear classifier, whose input is the penultimate feature vector (NEO,
    LAME, SHOT-IM, SPA and ZeroSIAM work at that boundary), found as
    :func:`tempora_trace.models.feature_head` finds it for every model the tracer builds: one
    rule for every method, never "the last ``nn.Linear`` in module order" (wrong wherever a
    network computes after it). Where none is found: a one-line :class:`MethodError` saying how
    a model declares its head."""
    try:
        return feature_head(model, label).classifier
    except ConfigError as exc:
        raise MethodError(str(exc)) from None


def softmax_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Per-sample Shannon entropy of softmax(logits), in nats."""
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


def entropy_margin(num_classes: int, factor: float) -> float:
    """Entropy threshold ``factor · ln C`` (ETA/SAR/DeYO scale their margins by the class count)."""
    return factor * math.log(num_classes)
