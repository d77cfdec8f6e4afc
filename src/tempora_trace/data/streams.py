"""Data streams: domains, episodes, the i.i.d. batch order and the prefetching loader.

A *domain* is one distribution (a corruption at a severity, or a dataset variant). An
*episode* is what resets the method: one domain in an episodic stream, all domains back to back
in a continual stream. The batch order of a domain depends only on ``(seed, domain name)``, so
a resumed run or a run over a subset of domains sees exactly the same batches.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from tempora_schema import vocabulary

from ..errors import ConfigError

#: The 15 ImageNet-C / CIFAR-10-C corruptions in canonical order (tempora_schema.vocabulary).
CORRUPTIONS = list(vocabulary.CORRUPTIONS)
#: ``--domains`` groups: Hendrycks & Dietterich's four categories, and ``all``.
CORRUPTION_GROUPS = {**{name: list(names) for name, names in vocabulary.CORRUPTION_CATEGORIES.items()}, "all": CORRUPTIONS}


class BatchSource(Protocol):
    """A finite labelled dataset that can fetch a whole batch by indices at once."""

    def __len__(self) -> int: ...

    def get_batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Float NCHW images in [0, 1] and int64 labels."""
        ...


class ItemBatchSource:
    """Adapts a per-item dataset (e.g. ImageFolder) to :class:`BatchSource` by stacking."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def get_batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        items = [self.dataset[int(i)] for i in indices]
        return torch.stack([x for x, _ in items]), torch.as_tensor([int(y) for _, y in items], dtype=torch.int64)


@dataclass
class Domain:
    """One distribution the stream visits."""

    name: str
    severity: int | None
    source: BatchSource
    #: logits columns to score over (200-class ImageNet-R/-A), None = all.
    class_mask: list[int] | None = None


@dataclass
class Episode:
    """What the method sees between two resets: one or more domains, each ``batches`` long."""

    name: str
    domains: list[Domain]
    #: per domain, the list of index batches (drop_last, shuffled from (seed, domain)).
    batches: list[list[np.ndarray]] = field(default_factory=list)

    @property
    def num_batches(self) -> int:
        return sum(len(b) for b in self.batches)

    def locate(self, step: int) -> tuple[Domain, np.ndarray]:
        """The domain and sample indices of the batch at 0-based ``step``."""
        for domain, batches in zip(self.domains, self.batches):
            if step < len(batches):
                return domain, batches[step]
            step -= len(batches)
        raise IndexError(step)


def expand_domains(names: Sequence[str], available: Sequence[str]) -> list[str]:
    """Domain names with groups (noise/blur/weather/digital/all) expanded, order kept, no repeats."""
    out: list[str] = []
    for raw in names:
        for name in [n.strip() for n in raw.split(",") if n.strip()]:
            expanded = CORRUPTION_GROUPS.get(name, [name])
            for d in expanded:
                if d not in available:
                    raise ConfigError(
                        f"unknown domain '{d}'; available: {', '.join(available)} (or groups noise, blur, weather, digital, all)"
                    )
                if d not in out:
                    out.append(d)
    if not out:
        raise ConfigError("no domains selected")
    return out


def domain_seed(seed: int, domain: str) -> int:
    """Seed of a domain's shuffle: a function of (seed, domain name) only."""
    return (int(seed) * 1_000_003 + zlib.crc32(domain.encode())) % (2**63 - 1)


def batch_order(size: int, batch_size: int, seed: int, domain: str, max_batches: int | None = None) -> list[np.ndarray]:
    """I.i.d. shuffled index batches over ``size`` samples, last partial batch dropped."""
    perm = np.random.default_rng(domain_seed(seed, domain)).permutation(size)
    count = size // batch_size
    if max_batches is not None:
        count = min(count, max_batches)
    return [perm[i * batch_size : (i + 1) * batch_size] for i in range(count)]


def source_labels(source: BatchSource) -> np.ndarray:
    """Every sample's label, for label-shift orders; without labels such a stream cannot be built."""
    labels = getattr(source, "labels", None)
    if labels is None:
        labels = getattr(getattr(source, "dataset", None), "targets", None)
    if labels is None:
        raise ConfigError("--stream dirichlet needs the samples' labels, which this dataset does not expose")
    return np.asarray(labels, dtype=np.int64)


def dirichlet_order(
    labels: np.ndarray, batch_size: int, seed: int, domain: str, alpha: float, max_batches: int | None = None
) -> list[np.ndarray]:
    """Index batches in a label-shifted order: each class spread over time by Dirichlet(α).

    Time is cut into as many slots as there are full batches. Each class's samples (shuffled)
    are divided among the slots in proportions drawn from a symmetric Dirichlet(α) over slots,
    each slot's samples are shuffled, and the slots are played in order; the sequence is then
    cut into batches (last partial batch dropped). Small α puts each class into a few slots,
    so the stream has long single-class runs (temporally correlated labels); large α spreads
    every class evenly and approaches the i.i.d. order. Seeded from ``(seed, domain)`` only,
    like :func:`batch_order`.
    """
    if not (np.isfinite(alpha) and alpha > 0):
        raise ConfigError(f"--dirichlet-alpha must be a finite number > 0 (got {alpha})")
    labels = np.asarray(labels, dtype=np.int64)
    count = len(labels) // batch_size
    if max_batches is not None:
        count = min(count, max_batches)
    if count == 0:
        return []
    rng = np.random.default_rng([domain_seed(seed, domain), 0xD1])
    slots: list[list[np.ndarray]] = [[] for _ in range(len(labels) // batch_size)]
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        weights = rng.dirichlet(np.full(len(slots), alpha))
        cuts = np.floor(np.cumsum(weights)[:-1] * len(members)).astype(np.int64)
        for slot, part in zip(slots, np.split(members, cuts)):
            if part.size:
                slot.append(part)
    order = np.concatenate([rng.permutation(np.concatenate(s)) for s in slots if s])
    return [order[i * batch_size : (i + 1) * batch_size] for i in range(count)]
