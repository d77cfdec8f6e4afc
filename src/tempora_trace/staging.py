"""Staging: decode upcoming batches while nothing is timed, then time them with every loader idle.

Any loading that runs during a timed event inflates it — loader threads through the GIL,
worker processes through CPU cores and memory bandwidth — on a CPU and on a GPU alike. So the
tracer never overlaps the two: it decodes a *chunk* of upcoming batches in parallel
(``workers`` decode threads; image decoding and tensor conversion release the GIL), waits
until every one of them is finished, and only then runs that chunk's events. Nothing loads
while an event is timed, for adapt rows and frozen-checkpoint rows alike.

A chunk holds as many batches as fit in ``stage_mb`` MiB of host memory (at least one),
pinned when the batches go to a CUDA device, so the host→device copy is a plain DMA.

:func:`stage_batches` is the one-shot form; :class:`BatchStager` keeps its decode threads
between chunks and hands out whole chunks (:meth:`BatchStager.chunks`). Both are meant for
any runner that times events on staged batches (the trace runner, a live-protocol runner).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import torch

from .data.streams import Episode
from .options import DEFAULT_STAGE_MB

#: ``observer(first_step, last_step, t_start_ns, t_end_ns)`` after each decode pass, with
#: ``time.perf_counter_ns`` stamps taken before the first decode started and after the last
#: one finished (tests use it to prove that no loading overlaps a timed event).
StageObserver = Callable[[int, int, int, int], None]


@dataclass
class StagedBatch:
    """One decoded batch in host memory: the stream step, images (NCHW float) and labels."""

    step: int
    x: torch.Tensor
    y: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.x.numel() * self.x.element_size() + self.y.numel() * self.y.element_size()


def default_workers(cpu_count: int | None) -> int:
    """Decode workers when ``--workers`` is not given: every core, up to 8. Decoding only
    runs between chunks, never beside a timed event, so it may use the cores the events use."""
    return max(0, min(8, cpu_count or 1))


class BatchStager:
    """Decodes batches of an episode on ``workers`` threads (0: in the calling thread) into
    host memory, ``stage_mb`` MiB per chunk at most; pins them when ``pin_memory``.

    Every method returns only after all decoding it started has finished, so between calls
    the decode threads are idle (blocked on an empty queue).
    """

    def __init__(
        self, workers: int = 0, pin_memory: bool = False, stage_mb: float = DEFAULT_STAGE_MB, observer: StageObserver | None = None
    ):
        if workers < 0:
            raise ValueError("workers must be ≥ 0")
        if not stage_mb > 0:
            raise ValueError("stage_mb must be > 0")
        self.workers = workers
        self.pin_memory = pin_memory
        self.stage_bytes = int(stage_mb * 2**20)
        self.observer = observer
        self._pool = None
        if workers > 0:
            # One intra-op thread per decode thread (OpenMP's count is per thread): the workers
            # are the parallelism, so no decode thread starts a thread team of its own, which
            # would oversubscribe the cores and could leave threads spinning after its work.
            # On a 16-core host, 8 decode threads staging 50 batches of 64 JPEGs took 1.98 s
            # this way against 2.28 s with 16 intra-op threads each (medians of 3).
            self._pool = ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="tempora-decode", initializer=torch.set_num_threads, initargs=(1,)
            )

    def _load(self, episode: Episode, step: int) -> StagedBatch:
        domain, indices = episode.locate(step)
        x, y = domain.source.get_batch(indices)
        if self.pin_memory:
            x = x.pin_memory()
        return StagedBatch(step, x, y)

    def stage(self, episode: Episode, steps: Sequence[int]) -> list[StagedBatch]:
        """Decode ``steps`` of ``episode`` in parallel; the batches in the order asked."""
        steps = list(steps)
        if not steps:
            return []
        t0 = time.perf_counter_ns()
        if self._pool is None or len(steps) == 1:
            out = [self._load(episode, s) for s in steps]
        else:
            futures: list[Future] = [self._pool.submit(self._load, episode, s) for s in steps]
            try:
                out = [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                for f in futures:  # never return while a decode is still running
                    if not f.cancelled():
                        f.exception()
                raise
        if self.observer is not None:
            self.observer(steps[0], steps[-1], t0, time.perf_counter_ns())
        return out

    def chunk_length(self, batch_bytes: int) -> int:
        """Batches per chunk: as many as fit in the cap, at least one."""
        return max(1, self.stage_bytes // max(1, batch_bytes))

    def chunks(self, episode: Episode, steps: Iterable[int]) -> Iterator[list[StagedBatch]]:
        """Yield ``steps`` as consecutive staged chunks. The first batch is decoded alone to
        learn the size of a batch; later chunks are staged only when the caller asks for
        them, i.e. after it has finished timing the previous chunk's events."""
        steps = list(steps)
        if not steps:
            return
        first = self.stage(episode, steps[:1])
        length = self.chunk_length(first[0].nbytes)
        chunk = first + self.stage(episode, steps[1:length])
        del first
        start = length
        while True:
            yield chunk
            # The caller asked for the next chunk: it is done with this one. Empty the list
            # it holds too, so at most one chunk's batches are alive while the next decodes.
            chunk.clear()
            if start >= len(steps):
                return
            chunk = self.stage(episode, steps[start : start + length])
            start += length

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "BatchStager":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def stage_batches(episode: Episode, steps: Sequence[int], workers: int = 0, pin_memory: bool = False) -> list[StagedBatch]:
    """Decode ``steps`` of ``episode`` on ``workers`` threads and return them, in order, once
    every decode has finished (no memory cap: the caller chooses how many steps to ask for)."""
    with BatchStager(workers, pin_memory) as stager:
        return stager.stage(episode, steps)
