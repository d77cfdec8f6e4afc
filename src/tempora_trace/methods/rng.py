"""The method-owned random generator (:class:`MethodRNG`): torch only, so a method that draws
random numbers without augmented views (CoTTA's restore, a teacher's noise) does not import
torchvision with :mod:`.augment`."""

from __future__ import annotations

import torch

__all__ = ["MethodRNG"]


class MethodRNG:
    """A seeded generator per device whose state can be snapshotted and restored.

    Seeded from ``torch.initial_seed()`` so a tracer that seeds torch gets reproducible runs
    without an extra option."""

    def __init__(self, seed: int | None = None):
        self.seed = int(torch.initial_seed() if seed is None else seed) % (2**63)
        self._gens: dict[str, torch.Generator] = {}
        self._pending: dict[str, torch.Tensor] = {}

    def get(self, device: torch.device | str) -> torch.Generator:
        key = str(torch.device(device))
        gen = self._gens.get(key)
        if gen is None:
            gen = torch.Generator(device=torch.device(device))
            gen.manual_seed(self.seed)
            if key in self._pending:
                gen.set_state(self._pending.pop(key))
            self._gens[key] = gen
        return gen

    def state(self) -> dict[str, torch.Tensor]:
        states = {k: g.get_state() for k, g in self._gens.items()}
        states.update({k: v for k, v in self._pending.items() if k not in states})
        return states

    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Restore every generator; devices never used so far start from the seed."""
        for key, gen in self._gens.items():
            if key in state:
                gen.set_state(state[key])
            else:
                gen.manual_seed(self.seed)
        self._pending = {k: v for k, v in state.items() if k not in self._gens}
