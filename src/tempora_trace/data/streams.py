"""Data streams: domains, episodes, the i.i.d. batch order and the prefetching loader.

A *domain* is one distribution (a corruption at a severity, or a dataset variant). An
*episode* is what resets the method: one domain in an episodic stream, all domains back to back
in a continual stream (each at the severities 1 → peak → 1 in a gradual one), and every
domain's samples shuffled together in a mixed one; the unreset streams may repeat over rounds
(:func:`plan_stream`). The batch order of a domain depends only on ``(seed, domain name)``
(and its place in a ramp or round), so a resumed run or a run over a subset of domains sees
exactly the same batches.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

import tempora_schema as schema
from tempora_schema import vocabulary

from ..errors import ConfigError, DataError

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
    #: cumulative batch counts of the segments (filled by :meth:`locate`)
    _ends: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), init=False, repr=False, compare=False)

    @property
    def num_batches(self) -> int:
        return sum(len(b) for b in self.batches)

    def locate(self, step: int) -> tuple[Domain, np.ndarray]:
        """The domain and sample indices of the batch at 0-based ``step`` (a binary search over
        the segments: a long stream holds thousands of them, one per domain, ramp step and round)."""
        ends = self._ends
        if len(ends) != len(self.batches):
            ends = self._ends = np.cumsum([len(b) for b in self.batches], dtype=np.int64)
        if not 0 <= step < (int(ends[-1]) if len(ends) else 0):
            raise IndexError(step)
        k = int(np.searchsorted(ends, step, side="right"))
        return self.domains[k], self.batches[k][step - (int(ends[k - 1]) if k else 0)]


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


class MixedSource:
    """The chosen domains' samples as one :class:`BatchSource` (a mixed stream): index ``i``
    is sample ``i - offset[k]`` of the domain ``k`` whose range holds it, so a batch of
    shuffled indices draws from every domain at once."""

    def __init__(self, sources: Sequence[BatchSource]):
        self.sources = list(sources)
        self.offsets = np.concatenate([[0], np.cumsum([len(s) for s in self.sources])]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def domain_of(self, indices: Sequence[int]) -> np.ndarray:
        """The position (in the chosen domains) of the domain each index draws from."""
        return np.searchsorted(self.offsets, np.asarray(indices, dtype=np.int64), side="right") - 1

    def _split(self, indices: Sequence[int]):
        idx = np.asarray(indices, dtype=np.int64)
        which = self.domain_of(idx)
        for k in np.unique(which):
            where = np.flatnonzero(which == k)
            yield int(k), where, idx[where] - self.offsets[k]

    def get_batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [(where, *self.sources[k].get_batch(local)) for k, where, local in self._split(indices)]
        x = torch.empty((len(indices), *parts[0][1].shape[1:]), dtype=parts[0][1].dtype)
        y = torch.empty(len(indices), dtype=torch.int64)
        for where, xs, ys in parts:
            pos = torch.as_tensor(where)
            x[pos], y[pos] = xs, ys
        return x, y

    @property
    def labels(self) -> np.ndarray | None:
        """Every sample's label where every domain exposes them."""
        try:
            return np.concatenate([source_labels(s) for s in self.sources])
        except ConfigError:
            return None

    def check_readable(self, indices: Sequence[int], workers: int = 4) -> None:
        """Each domain's own check (folder images) on its share of ``indices``."""
        for k, _, local in self._split(indices):
            check = getattr(self.sources[k], "check_readable", None)
            if check is not None:
                check(local, workers=workers)


def round_key(key: str, round_index: int) -> str:
    """The shuffle key of a domain's ``round_index``-th (0-based) repetition: the key itself in
    the first round, so a stream's first round is exactly the one-round stream."""
    return key if round_index == 0 else f"{key}#round{round_index + 1}"


def plan_stream(
    stream: str,
    names: Sequence[str],
    open_domain: Callable[[str, int | None], Domain],
    severity: int | None,
    batch_size: int,
    seed: int,
    max_batches: int | None = None,
) -> list[Episode]:
    """The episodes of ``stream`` (:mod:`tempora_schema`'s stream names) over the domains
    ``names``, each opened by ``open_domain(name, severity)``.

    - ``episodic``: one episode per domain; ``dirichlet:<α>``: the same in a label-shifted order.
    - ``continual``: one episode, the domains in order.
    - ``gradual``: one episode, each domain at the severities ``1 → severity → 1`` in turn
      (:func:`tempora_schema.gradual_severities`); ``max_batches`` caps each of these segments.
    - ``mixed``: one episode over the union of every domain's samples, shuffled together;
      ``max_batches`` caps it at ``max_batches × len(names)`` batches, what a continual stream holds.
    - ``<stream>:x<r>``: the unreset streams' domain sequence played ``r`` times in the one
      episode, each round shuffled afresh (the first exactly as the one-round stream).

    Every order is seeded from the seed and the domain name (with its place in the ramp or
    round) only: the same seed gives the same batches."""
    base, rounds = schema.stream_base(stream), schema.stream_rounds(stream)
    alpha = schema.stream_alpha(stream)
    if base == "gradual":
        if severity is None:
            raise ConfigError("--stream gradual ramps the corruption severity; this dataset has none")
        ramp = schema.gradual_severities(severity)
        segments = [(open_domain(n, s), f"{n}@sev{s}#{j}") for n in names for j, s in enumerate(ramp)]
    else:
        segments = [(open_domain(n, severity), n) for n in names]
    if base == schema.MIXED_DOMAIN:
        severities = {d.severity for d, _ in segments}
        source = MixedSource([d.source for d, _ in segments])
        mixed = Domain(schema.MIXED_DOMAIN, severities.pop() if len(severities) == 1 else None, source, segments[0][0].class_mask)
        if len(source) < batch_size:
            raise DataError(f"the mixed domains hold {len(source)} samples, fewer than one batch of {batch_size}")
        cap = None if max_batches is None else max_batches * len(names)
        orders = [batch_order(len(source), batch_size, seed, round_key(schema.MIXED_DOMAIN, r), cap) for r in range(rounds)]
        return [Episode(schema.MIXED_DOMAIN, [mixed] * rounds, orders)]
    for d, _ in segments:
        if len(d.source) < batch_size:
            raise DataError(f"domain '{d.name}' has {len(d.source)} samples, fewer than one batch of {batch_size}")
    if alpha is not None:
        orders = [dirichlet_order(source_labels(d.source), batch_size, seed, key, alpha, max_batches) for d, key in segments]
        return [Episode(d.name, [d], [o]) for (d, _), o in zip(segments, orders)]
    played = [
        (d, batch_order(len(d.source), batch_size, seed, round_key(key, r), max_batches)) for r in range(rounds) for d, key in segments
    ]
    if base in schema.UNRESET_STREAMS:
        return [Episode(base, [d for d, _ in played], [o for _, o in played])]
    return [Episode(d.name, [d], [o]) for d, o in played]
