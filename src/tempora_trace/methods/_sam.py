"""Sharpness-aware minimisation (SAM) around a base optimiser, as SAR uses it.

Foret et al., "Sharpness-Aware Minimization for Efficiently Improving Generalization",
ICLR 2021 (arXiv:2010.01412). One SAM update is two gradient evaluations: climb to the
worst-case neighbour ``w + ε(w)`` with ``ε = ρ · g / ‖g‖₂`` (``first_step``), take the gradient
there, return to ``w`` and let the base optimiser step with that gradient (``second_step``).

Unlike the common reference code, this is not an ``Optimizer`` subclass holding a second,
hidden optimiser: ``state_dict`` *is* the base optimiser's state (momentum buffers included), so
snapshot/restore and SAR's model recovery really return the optimiser to where it was.
"""

from __future__ import annotations

from typing import Any

import torch


class SAM:
    """SAM wrapper; ``base`` is an already-built optimiser over the adapted parameters."""

    def __init__(self, base: torch.optim.Optimizer, rho: float = 0.05):
        if rho < 0:
            raise ValueError(f"SAM rho must be non-negative, not {rho}")
        self.base = base
        self.rho = rho
        #: (parameter, its value at w) for every parameter moved by ``first_step``; restoring the
        #: saved copy (not subtracting ε) makes the round trip exact in floating point.
        self._perturbation: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.base.param_groups

    def _params_with_grad(self) -> list[torch.Tensor]:
        return [p for g in self.base.param_groups for p in g["params"] if p.grad is not None]

    @torch.no_grad()
    def first_step(self) -> None:
        """Move every parameter to ``w + ρ·g/‖g‖`` (‖·‖ over all parameters jointly) and clear
        the gradients for the second evaluation. List-wide ``torch._foreach_*`` calls: the
        per-tensor arithmetic of a Python loop, bit for bit on a CPU, without the loop."""
        params = self._params_with_grad()
        self._perturbation = []
        if not params:
            return
        grads = [p.grad for p in params]
        grad_norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2)), 2)
        scale = self.rho / (grad_norm + 1e-12)
        self._perturbation = list(zip(params, [p.detach().clone() for p in params]))
        torch._foreach_add_(params, torch._foreach_mul(grads, scale.to(params[0])))
        self.zero_grad()

    @torch.no_grad()
    def undo_perturbation(self) -> None:
        """Back to ``w`` without stepping (used when the second pass leaves nothing to learn)."""
        if self._perturbation:
            params, saved = zip(*self._perturbation)
            torch._foreach_copy_(list(params), list(saved))
        self._perturbation = []

    @torch.no_grad()
    def second_step(self) -> None:
        """Back to ``w``, then the base optimiser steps with the gradient taken at ``w + ε``."""
        self.undo_perturbation()
        self.base.step()
        self.zero_grad()

    def zero_grad(self) -> None:
        self.base.zero_grad(set_to_none=True)

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._perturbation = []
        self.base.load_state_dict(state)
