"""The teacher–student pattern (CoTTA, RoTTA and their kin) as a base class.

A :class:`TeacherStudentMethod` keeps two copies of the network: the *student* (``self.model``),
which the optimiser trains, and the *teacher* (``self.teacher``), an exponential moving average
(EMA) of the student whose outputs are the method's predictions. Optionally it keeps an
*anchor* (``self.anchor``), a frozen copy of the configured source model, and restores the
adapted parameters stochastically towards their source values after each step.

Where the work falls (docs/design/design.md §2):

- ``predict(x)`` (timed as ``e``) runs :meth:`TeacherStudentMethod.teacher_output`, by default
  one teacher forward; a method adds what must precede its output (CoTTA: the anchor's
  confidence and the augmentation average). The student does not run here.
- ``adapt()`` (timed as ``ℓ``) calls the update hook ``update(x, teacher_logits)``: by default
  the student's ``loss`` against the teacher's output, one optimiser step, then
  :meth:`TeacherStudentMethod.after_student_step` (the EMA teacher update and the stochastic
  restore). ``skip_adapt()`` (a sparse policy's unadapted batch) drops what ``predict`` kept.

The teacher is part of the method's state: ``extra_state()`` holds its parameters and buffers
and the method's random generator, so ``reset()``, ``snapshot()``/``restore()`` and the
tracer's checkpoints cover it; ``set_train_modules`` covers the teacher's normalisation layers,
so frozen mode (docs/design/design.md §5) predicts with the teacher on its running statistics.
The anchor never changes and so is no part of the state.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch
import torch.nn as nn

from ..norms import BN_TYPES
from .base import MethodContext
from .gradient import GradientMethod, dense_nchw
from .rng import MethodRNG

__all__ = ["TeacherStudentMethod", "ema_update", "stochastic_restore"]


@torch.no_grad()
def ema_update(teacher: nn.Module, student: nn.Module, keep: float, take: float) -> None:
    """``t ← keep·t + take·s`` for every parameter pair of two networks of one architecture
    (buffers are not averaged: each network's normalisation statistics follow its own
    forwards, as in the CoTTA and RoTTA authors' code)."""
    t_params = [p.data for p in teacher.parameters()]
    s_params = [p.data for p in student.parameters()]
    if len(t_params) != len(s_params):
        raise ValueError(f"teacher has {len(t_params)} parameters, student {len(s_params)}")
    torch._foreach_mul_(t_params, keep)
    torch._foreach_add_(t_params, s_params, alpha=take)


@torch.no_grad()
def stochastic_restore(params: list[tuple[str, nn.Parameter]], source: dict[str, torch.Tensor], probability: float, rng: MethodRNG) -> None:
    """Each element of each parameter independently goes back to its source value with
    ``probability`` (CoTTA's stochastic restore): ``p ← m·source + (1 − m)·p`` with
    ``m ~ Bernoulli(probability)`` drawn elementwise, in the order of ``params``, from the
    generator of the parameter's device."""
    for name, p in params:
        mask = torch.rand(p.shape, generator=rng.get(p.device), device=p.device) < probability
        p.data.copy_(torch.where(mask, source[name], p.data))


class TeacherStudentMethod(GradientMethod):
    """Base for methods whose prediction comes from an EMA teacher of the trained student.

    Construction is :class:`GradientMethod`'s (options, ``prepare`` — which may replace
    modules —, normalisation set-up, parameter choice, optimiser), then:

    - the teacher: a copy of the configured student, parameters without gradients;
    - the anchor (when ``uses_anchor``): another copy, its BatchNorm layers on batch
      statistics with tracking off, so it never changes;
    - the source values of the adapted parameters, for :meth:`restore_towards_source`;
    - a method-owned random generator (``self.rng``, snapshot-safe).

    Hooks a method overrides:

    - :meth:`teacher_output` (in ``e``): the prediction from the teacher; default one
      teacher forward;
    - :meth:`loss` (in ``ℓ``): the student's objective given the batch and the teacher's
      output (detached); or :meth:`update` for anything else (RoTTA learns from a memory
      bank, not from the batch);
    - :meth:`teacher_weights`: ``(keep, take)`` of the EMA, ``t ← keep·t + take·s``;
      default from the option ``teacher_momentum`` (α: keep α, take 1 − α);
    - :meth:`restore_probability`: default the option ``restore_probability`` if the
      method has it, else 0 (no restore).

    ``updated`` is True on a batch whose step changed the student (and so the teacher).
    Frozen mode predicts with the teacher alone, its normalisation on running statistics.
    """

    #: keep a frozen copy of the source model (``self.anchor``) beside student and teacher.
    uses_anchor: ClassVar[bool] = False

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        #: the EMA of the student; its outputs are the predictions.
        self.teacher = self._frozen_copy(model)
        #: the frozen source model (None unless ``uses_anchor``).
        self.anchor: nn.Module | None = None
        if self.uses_anchor:
            self.anchor = self._frozen_copy(model)
            for m in self.anchor.modules():
                if isinstance(m, BN_TYPES):
                    m.track_running_stats = False  # batch statistics, buffers never move
        #: the teacher's BatchNorm layers (batch statistics while adapting, tracked for frozen mode).
        self.teacher_bn_layers = [m for m in self.teacher.modules() if isinstance(m, BN_TYPES)]
        self.set_train_modules(self.bn_layers + self.teacher_bn_layers)
        #: source values of the adapted parameters (what the stochastic restore returns to).
        self.source_values = {name: p.detach().clone() for name, p in self.adapted}
        self.rng = MethodRNG()

    @staticmethod
    def _frozen_copy(model: nn.Module) -> nn.Module:
        twin = copy.deepcopy(model)
        twin.requires_grad_(False)
        return twin

    # ------------------------------------------------------------------ hooks
    def teacher_output(self, x: torch.Tensor) -> torch.Tensor:
        """The prediction for ``x`` (called under ``no_grad``, inside ``e``)."""
        return self.teacher(x)

    def teacher_weights(self) -> tuple[float, float]:
        """``(keep, take)`` of the EMA teacher update ``t ← keep·t + take·s``."""
        alpha = float(self.params["teacher_momentum"])
        return alpha, 1.0 - alpha

    def restore_probability(self) -> float:
        """Probability that one element of an adapted parameter returns to its source value
        after a step (0: no restore)."""
        return float(self.params.get("restore_probability", 0.0))

    def loss(self, x: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor | None:
        """The student's objective on ``x`` given the teacher's (detached) output."""
        raise NotImplementedError(f"{type(self).__name__} must implement loss() or update()")

    # --------------------------------------------------------------- building blocks
    def update_teacher(self) -> None:
        """One EMA step of the teacher towards the student."""
        keep, take = self.teacher_weights()
        ema_update(self.teacher, self.model, keep, take)

    def restore_towards_source(self) -> None:
        """The stochastic restore of every adapted parameter (nothing at probability 0)."""
        probability = self.restore_probability()
        if probability > 0:
            stochastic_restore(self.adapted, self.source_values, probability, self.rng)

    def after_student_step(self) -> None:
        """What follows each optimiser step: the teacher update, then the restore."""
        self.update_teacher()
        self.restore_towards_source()

    # ------------------------------------------------------------ the two phases
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self._pending = None
        self.last_updated = False
        x = dense_nchw(x)
        with torch.no_grad():
            if self.frozen:
                return self.teacher(x)
            out = self.teacher_output(x)
        self._pending = (x, out)
        return out

    def update(self, x: torch.Tensor, teacher_logits: torch.Tensor) -> bool:
        """The student's step on ``x`` against the teacher's output, then
        :meth:`after_student_step`; True when a step was taken."""
        loss = self.loss(x, teacher_logits.detach())
        if loss is None:
            return False
        self._step(loss)
        self.after_student_step()
        return True

    # ------------------------------------------------------------ state
    def extra_state(self) -> dict[str, Any]:
        return {"teacher": self.teacher.state_dict(), "rng": self.rng.state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.teacher.load_state_dict(state["teacher"], strict=True)
        self.rng.load(state["rng"])
