"""RoTTA: robust test-time adaptation in dynamic scenarios.

Yuan, Xie & Li, "Robust Test-Time Adaptation in Dynamic Scenarios", CVPR 2023
(arXiv:2303.13899). Three parts, as in the authors' code:

- **Robust BatchNorm (RBN).** Every BatchNorm layer is replaced by one that normalises with
  global statistics: starting from the source statistics, each train-mode forward moves them
  by ``μ ← (1 − m)·μ + m·μ_batch``, ``σ² ← (1 − m)·σ² + m·σ²_batch`` (biased batch variance,
  m = ``rbn_momentum`` = 0.05) and normalises with the moved values (gradients flow through
  the batch part); an eval-mode forward uses the stored values.
- **Category-balanced sampling with timeliness and uncertainty (CSTU).** Each test sample
  enters a memory bank of ``memory_size`` (64) under its teacher pseudo-label with score
  ``λ_t/(1 + exp(−age/capacity)) + λ_u·H/ln C``; a full class (more than capacity/C entries),
  or a full bank, evicts its highest-scoring entry (over the majority classes when the bank is
  full) if that entry scores above the newcomer, else the newcomer is dropped. Every entry
  ages by one per sample seen.
- **Timeliness-weighted teacher–student update.** After every ``update_frequency`` (64)
  samples the student learns from the whole bank: cross-entropy of the student on a strong
  augmentation of the bank against the teacher on the bank itself, each entry weighted by
  ``exp(−a)/(1 + exp(−a))`` with ``a = age/capacity``; one Adam step (lr 1e-3, β 0.9/0.999)
  on the RBN affine parameters, then the teacher's EMA step ``t ← (1 − ν)·t + ν·s`` (ν = 0.001).

Time split: ``e`` (``predict``) is one teacher forward in eval mode (RBN on its stored
statistics); ``ℓ`` (``adapt``) holds the memory insertions and, on the batches where the
sample count passes a multiple of ``update_frequency``, the bank's teacher and student
forwards (which move both networks' RBN statistics), the backward, the step and the EMA.
Frozen mode predicts exactly as ``predict`` does and learns nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from . import register
from .base import AS_DEFAULT, Departure, MethodContext, MethodError
from .cotta import cotta_augment, soft_cross_entropy
from .teacher import TeacherStudentMethod

__all__ = ["CategoryBalancedMemory", "MemoryEntry", "RoTTA", "RobustBatchNorm", "timeliness_weights"]


class RobustBatchNorm(nn.Module):
    """RoTTA's robust BatchNorm for 2-D (N×C) and 4-D (N×C×H×W) inputs: global statistics
    moved by each train-mode forward (see the module docstring), stored ones in eval mode."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm, momentum: float):
        super().__init__()
        if bn.running_mean is None or bn.running_var is None:
            raise MethodError("method 'rotta' needs BatchNorm layers with source running statistics")
        self.num_features = bn.num_features
        self.momentum = momentum
        self.eps = bn.eps
        self.register_buffer("mean", bn.running_mean.detach().clone())
        self.register_buffer("var", bn.running_var.detach().clone())
        weight = bn.weight.detach().clone() if bn.weight is not None else torch.ones(bn.num_features, device=bn.running_mean.device)
        bias = bn.bias.detach().clone() if bn.bias is not None else torch.zeros(bn.num_features, device=bn.running_mean.device)
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (1, -1) + (1,) * (x.dim() - 2)
        if self.training:
            dims = [0] + list(range(2, x.dim()))
            b_var, b_mean = torch.var_mean(x, dim=dims, unbiased=False)
            mean = (1 - self.momentum) * self.mean + self.momentum * b_mean
            var = (1 - self.momentum) * self.var + self.momentum * b_var
            self.mean = mean.detach().clone()
            self.var = var.detach().clone()
        else:
            mean, var = self.mean, self.var
        out = (x - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
        return out * self.weight.view(shape) + self.bias.view(shape)


@dataclass
class MemoryEntry:
    data: torch.Tensor
    uncertainty: float
    age: int = 0


class CategoryBalancedMemory:
    """RoTTA's CSTU memory bank: ``capacity`` entries spread over ``num_classes`` classes."""

    def __init__(self, capacity: int, num_classes: int, lambda_t: float = 1.0, lambda_u: float = 1.0):
        self.capacity = capacity
        self.num_classes = num_classes
        self.per_class = capacity / num_classes
        self.lambda_t = lambda_t
        self.lambda_u = lambda_u
        self.classes: list[list[MemoryEntry]] = [[] for _ in range(num_classes)]

    def __len__(self) -> int:
        return sum(len(c) for c in self.classes)

    def score(self, age: int, uncertainty: float) -> float:
        """Higher is worse: old and uncertain entries go first."""
        return self.lambda_t / (1 + math.exp(-age / self.capacity)) + self.lambda_u * uncertainty / math.log(self.num_classes)

    def add(self, data: torch.Tensor, label: int, uncertainty: float) -> bool:
        """Offer one sample; True when it was stored. Every stored entry ages by one either way."""
        stored = self._make_room(label, self.score(0, uncertainty))
        if stored:
            self.classes[label].append(MemoryEntry(data, uncertainty))
        for entries in self.classes:
            for entry in entries:
                entry.age += 1
        return stored

    def _make_room(self, label: int, new_score: float) -> bool:
        if len(self.classes[label]) < self.per_class:
            if len(self) < self.capacity:
                return True
            counts = [len(c) for c in self.classes]
            most = max(counts)
            return self._evict([k for k, n in enumerate(counts) if n == most], new_score)
        return self._evict([label], new_score)

    def _evict(self, candidates: list[int], new_score: float) -> bool:
        """Drop the worst entry of ``candidates`` (the last of equal scores) if it scores above
        the newcomer; True when there is room now."""
        worst: tuple[float, int, int] | None = None
        for k in candidates:
            for i, entry in enumerate(self.classes[k]):
                s = self.score(entry.age, entry.uncertainty)
                if worst is None or s >= worst[0]:
                    worst = (s, k, i)
        if worst is None:
            return True
        if worst[0] > new_score:
            self.classes[worst[1]].pop(worst[2])
            return True
        return False

    def contents(self) -> tuple[list[torch.Tensor], list[float]]:
        """The stored samples in class order and their ages divided by the capacity."""
        data = [e.data for entries in self.classes for e in entries]
        ages = [e.age / self.capacity for entries in self.classes for e in entries]
        return data, ages

    def state(self) -> list[list[tuple[torch.Tensor, float, int]]]:
        return [[(e.data, e.uncertainty, e.age) for e in entries] for entries in self.classes]

    def load(self, state: list[list[tuple[torch.Tensor, float, int]]]) -> None:
        self.classes = [[MemoryEntry(d, u, a) for d, u, a in entries] for entries in state]


def timeliness_weights(ages: torch.Tensor) -> torch.Tensor:
    """``exp(−a)/(1 + exp(−a))`` per entry (``a``: age over capacity)."""
    return torch.exp(-ages) / (1 + torch.exp(-ages))


@register
class RoTTA(TeacherStudentMethod):
    name = "rotta"
    compatible_norms = frozenset({"bn"})
    paper = "Yuan et al., Robust Test-Time Adaptation in Dynamic Scenarios (CVPR 2023)"
    updates = "robust-BN statistics and affine parameters (student, Adam, every 64 samples from the memory bank); EMA teacher"
    overhead = "intrinsic: one teacher forward; extrinsic: memory insertions, and every 64 samples teacher + student forwards on the bank, backward, step, EMA"
    non_negative_options = ("lr", "lambda_t", "lambda_u")
    fraction_options = ("momentum", "nu", "rbn_momentum")
    positive_int_options = ("memory_size", "update_frequency")
    #: the kit's streams (24 to 96 samples) would never reach a bank update at the default 64, so
    #: its checks would not see a learning step; a bank of 16 updated every 16 samples does, and
    #: its warm-up (a forward and backward at every bank size) is a quarter of the default's
    kit_params = {"memory_size": 16, "update_frequency": 16}
    departures = (
        Departure(
            point="random draws",
            default="a method-owned generator (the bank's strong augmentation), part of the snapshot",
            reference=AS_DEFAULT,
            authors="the global torch generator",
            reason="reset, snapshot and restore must replay the adapt path bit for bit (docs/design/design.md §2)",
        ),
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {
            "lr": 1e-3,
            "momentum": 0.9,
            "nu": 0.001,
            "memory_size": 64,
            "update_frequency": 64,
            "lambda_t": 1.0,
            "lambda_u": 1.0,
            "rbn_momentum": 0.05,
        }

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        self.memory = CategoryBalancedMemory(
            int(self.params["memory_size"]), context.num_classes, float(self.params["lambda_t"]), float(self.params["lambda_u"])
        )
        #: test samples seen (the update runs whenever it reaches a multiple of update_frequency)
        self.seen = 0
        #: how many bank updates the last batch ran (a diagnostic)
        self.last_bank_updates = 0

    # ------------------------------------------------------------------ construction hooks
    def prepare(self, model: nn.Module) -> None:
        """Replace every BatchNorm layer by a robust one (module replacement)."""
        targets = [(n, m) for n, m in model.named_modules() if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d))]
        for name, bn in targets:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            rbn = RobustBatchNorm(bn, float(self.params["rbn_momentum"]))
            rbn.train(False)
            setattr(parent, child, rbn)

    def configure_norms(self, model: nn.Module) -> list[nn.Module]:
        return []  # the robust layers switch to train mode only inside the bank update

    def choose_parameters(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        return [
            (f"{mn}.{pn}" if mn else pn, p)
            for mn, m in model.named_modules()
            if isinstance(m, RobustBatchNorm)
            for pn, p in (("weight", m.weight), ("bias", m.bias))
        ]

    def build_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=self.params["lr"], betas=(self.params["momentum"], 0.999), weight_decay=0.0)

    def teacher_weights(self) -> tuple[float, float]:
        nu = float(self.params["nu"])
        return 1.0 - nu, nu

    # ------------------------------------------------------------------ ℓ
    def update(self, x: torch.Tensor, teacher_logits: torch.Tensor) -> bool:
        """Offer every sample to the bank under the teacher's pseudo-label and entropy; run the
        bank update whenever the sample count reaches a multiple of ``update_frequency``.
        Always True: the bank's contents, ages and the sample count are state that later
        predictions depend on."""
        probs = teacher_logits.softmax(1)
        labels = probs.argmax(1).tolist()
        entropies = (-(probs * torch.log(probs + 1e-6)).sum(1)).tolist()
        kept = x.detach().clone()
        frequency = int(self.params["update_frequency"])
        self.last_bank_updates = 0
        for i in range(kept.shape[0]):
            self.memory.add(kept[i], labels[i], entropies[i])
            self.seen += 1
            if self.seen % frequency == 0:
                self.bank_update()
                self.last_bank_updates += 1
        return True

    def bank_update(self) -> None:
        """One timeliness-weighted student step on the bank, then the teacher's EMA step."""
        data, ages = self.memory.contents()
        if data:
            bank = torch.stack(data)
            strong = cotta_augment(bank, self.rng.get("cpu"), noise_gen=self.rng.get(bank.device))
            self.model.train()
            self.teacher.train()
            try:
                with torch.no_grad():
                    target = self.teacher(bank)
                student = self.model(strong)
            finally:
                self.model.eval()
                self.teacher.eval()
            weights = timeliness_weights(torch.tensor(ages, dtype=student.dtype, device=student.device))
            self._step((soft_cross_entropy(student, target) * weights).mean())
        self.update_teacher()

    def warm_up_shapes(self, x: torch.Tensor) -> None:
        """The bank's forwards and backward at every bank size 1..memory_size (the bank grows
        and shrinks with the stream), built from copies of ``x``; no step is taken."""
        x = x.detach()
        reps = math.ceil(int(self.params["memory_size"]) / x.shape[0])
        pool = x.repeat(reps, *([1] * (x.dim() - 1)))
        self.model.train()
        self.teacher.train()
        try:
            for k in range(1, int(self.params["memory_size"]) + 1):
                with torch.no_grad():
                    self.teacher(pool[:k])
                with torch.enable_grad():
                    self.model(pool[:k]).float().logsumexp(1).sum().backward()
        finally:
            self.model.eval()
            self.teacher.eval()
        assert self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ state
    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "memory": self.memory.state(), "seen": self.seen}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.memory.load(state["memory"])
        self.seen = int(state["seen"])
