"""One trace run: warm up, stream every episode through the method under the clock, score
frozen checkpoints on the side, write the trace (docs/design.md §2, §3, §5).

The adapt path is the same whether or not checkpoints are evaluated: each frozen evaluation
snapshots the method (model, optimiser, extra state) and the RNG states, evaluates, then
restores them, so the rows of the online stream are bit-identical on CPU to a run without
checkpoints. Each episode starts from ``reset()`` and an RNG seeded from ``(seed, episode)``,
which is what makes ``--resume`` and domain subsets reproduce the same rows.
"""

from __future__ import annotations

import os
import random
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

import tempora_schema as schema

from . import __version__
from .checkpoints import BudgetCutoffs, default_schedule, sample_steps
from .config import TraceConfig
from .data import Episode, batch_order, get_dataset
from .data.streams import domain_seed
from .errors import ConfigError, DataError
from .methods import get_method
from .methods._common import NORM_NAMES, incompatibility_message
from .methods.base import MethodContext, TTAMethod
from .models import get_model
from .timing import DeviceClock, describe_device, device_slug, resolve_device, timed_event
from .writer import RowBuffer, TraceWriter


# ------------------------------------------------------------------------ streams
def build_episodes(domains, cfg: TraceConfig) -> list[Episode]:
    """Episodic: one episode per domain. Continual: one episode over all domains in order."""
    orders = []
    for d in domains:
        if len(d.source) < cfg.batch_size:
            raise DataError(f"domain '{d.name}' has {len(d.source)} samples, fewer than one batch of {cfg.batch_size}")
        orders.append(batch_order(len(d.source), cfg.batch_size, cfg.seed, d.name, cfg.max_batches))
    if cfg.stream == "continual":
        return [Episode("continual", list(domains), orders)]
    return [Episode(d.name, [d], [o]) for d, o in zip(domains, orders)]


class Prefetcher:
    """Fetches upcoming batches on background threads so the timed loop never waits on I/O.

    With ``workers == 0`` batches load synchronously between events (the default on CPU,
    where loader threads would compete with the measured computation for the same cores).
    """

    def __init__(self, workers: int, pin_memory: bool):
        self.workers = workers
        self.pin_memory = pin_memory
        self.pool = ThreadPoolExecutor(max_workers=workers) if workers > 0 else None

    def _load(self, episode: Episode, step: int):
        domain, indices = episode.locate(step)
        x, y = domain.source.get_batch(indices)
        if self.pin_memory:
            x = x.pin_memory()
        return step, x, y

    def iterate(self, episode: Episode, steps: Sequence[int]) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        if self.pool is None:
            for s in steps:
                yield self._load(episode, s)
            return
        depth = 2 * self.workers
        pending: list[Future] = []
        it = iter(steps)
        for s in it:
            pending.append(self.pool.submit(self._load, episode, s))
            if len(pending) >= depth:
                break
        while pending:
            result = pending.pop(0).result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(self.pool.submit(self._load, episode, nxt))
            yield result

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------------------ state
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng(device: torch.device) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def host_snapshot(method: TTAMethod) -> dict[str, Any]:
    """``method.snapshot()`` with the model state moved to host memory, so a snapshot held
    across timed events never inflates their measured peak device memory. ``restore`` copies
    it back in place (``load_state_dict``); optimiser and extra state stay as the method made
    them (small, and method-specific types)."""
    snap = method.snapshot()
    snap["model"] = {k: (v.to("cpu") if torch.is_tensor(v) else v) for k, v in snap["model"].items()}
    return snap


@dataclass
class EpisodeSummary:
    episode: str
    batches: int
    accuracy: float
    mean_e_ms: float
    mean_l_ms: float
    mean_delta_ms: float
    checkpoints: int

    def line(self) -> str:
        return (
            f"{self.episode:<20} acc {100 * self.accuracy:6.2f}%  e {self.mean_e_ms:8.2f} ms  "
            f"ℓ {self.mean_l_ms:8.2f} ms  δ {self.mean_delta_ms:8.2f} ms  "
            f"({self.batches} batches, {self.checkpoints} checkpoints)"
        )


def summarize(name: str, table) -> EpisodeSummary:
    d = table.to_pydict()
    idx = [i for i, p in enumerate(d["phase"]) if p == schema.PHASE_ADAPT]
    n = sum(d["n"][i] for i in idx)
    ckpts = {d["checkpoint"][i] for i, p in enumerate(d["phase"]) if p == schema.PHASE_FROZEN}
    mean = lambda col: float(np.mean([d[col][i] for i in idx])) if idx else 0.0  # noqa: E731
    return EpisodeSummary(name, len(idx), sum(d["correct"][i] for i in idx) / max(n, 1), mean("e_ms"), mean("l_ms"), mean("delta_ms"), len(ckpts))


# ------------------------------------------------------------------------ the run
class _Progress:
    """Rich progress bar per episode on stderr, only on a terminal and without --quiet."""

    def __init__(self, enabled: bool):
        self.bar = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
        self.task = None

    def start(self, name: str, total: int) -> None:
        if self.bar is not None:
            self.task = self.bar.add_task(name, total=total)

    def advance(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task)

    def end(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.remove_task(self.task)
            self.task = None

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class MethodRun:
    """Device, data, model, method and clock of one run, built and checked once.

    What the tracer (:class:`TraceRun`) and the live runner (:mod:`tempora_trace.live`) share,
    so both time the same events the same way: the same episodes and batch order, the same
    warm-up, the same scoring outside the timed regions.
    """

    def __init__(self, cfg: TraceConfig, echo: Callable[[str], None]):
        self.cfg = cfg
        self.echo = echo
        self.device = resolve_device(cfg.device)
        self.dataset = get_dataset(cfg.dataset)
        self.method_cls = get_method(cfg.method)
        model, self.model_spec = get_model(cfg.model, cfg.weights, num_classes=self.dataset.model_classes)
        if self.model_spec.family != self.dataset.family:
            raise ConfigError(
                f"model '{cfg.model}' is built for {self.model_spec.family} inputs ({self.model_spec.input_size}px); "
                f"dataset '{cfg.dataset}' is {self.dataset.family} (default model: {self.dataset.default_model})"
            )
        if self.model_spec.norm not in self.method_cls.compatible_norms:
            raise ConfigError(incompatibility_message(self.method_cls, f"model '{cfg.model}' uses {NORM_NAMES[self.model_spec.norm]}"))
        root = self.dataset.root(cfg.data_root)
        self.episodes = build_episodes([self.dataset.open(d, cfg.severity, root) for d in cfg.domains], cfg)
        self.clock = DeviceClock(self.device)
        workers = cfg.workers if cfg.workers is not None else (min(8, os.cpu_count() or 1) if self.device.type == "cuda" else 0)
        self.fetch = Prefetcher(workers, pin_memory=self.device.type == "cuda")
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = False
        seed_everything(cfg.seed)
        model.to(self.device)
        context = MethodContext(
            num_classes=self.model_spec.num_classes, dataset_family=self.dataset.family, batch_size=cfg.batch_size,
            device=str(self.device), model_name=cfg.model, norm_kind=self.model_spec.norm,
        )
        self.method: TTAMethod = self.method_cls(model, context, **cfg.method_params)
        self.masks = {}
        for ep in self.episodes:
            for d in ep.domains:
                if d.class_mask is not None:
                    self.masks[d.name] = torch.as_tensor(d.class_mask, dtype=torch.long)

    # -- scoring (outside the timed regions)
    def _correct(self, logits: torch.Tensor, labels: torch.Tensor, domain: str) -> int:
        logits = logits.detach()
        if domain in self.masks:
            logits = logits[:, self.masks[domain].to(logits.device)]
        return int((logits.argmax(1).cpu() == labels).sum())

    def warm_up(self) -> None:
        """Five noise-perturbed copies of the first batch through predict+adapt (and one
        frozen predict), then reset() — so lazy initialisation never lands in a timed row."""
        if self.cfg.warmup_batches == 0:
            return
        _, x, _ = next(self.fetch.iterate(self.episodes[0], [0]))
        x = x.to(self.device)
        gen = torch.Generator(device="cpu").manual_seed(self.cfg.seed)
        for _ in range(self.cfg.warmup_batches):
            noisy = (x.cpu() + 0.25 * torch.randn(x.shape, generator=gen)).to(self.device)
            timed_event(self.method, noisy, self.clock)
        self.method.freeze()
        timed_event(self.method, x, self.clock, adapt=False)
        self.method.unfreeze()
        self.method.reset()

    def start_episode(self, index: int, episode: Episode) -> None:
        """Reset where the stream says so (each episodic episode, the first continual one) and
        seed the RNGs from ``(seed, episode)``, so every run of an episode starts alike."""
        if self.cfg.stream == "episodic" or index == 0:
            self.method.reset()
        seed_everything(domain_seed(self.cfg.seed, episode.name))

    def run_metadata(self) -> dict[str, Any]:
        """The metadata every Tempora file about this run carries (trace and live run alike)."""
        cfg = self.cfg
        return {
            "method": cfg.method,
            "method_params": self.method.hparams(),
            "model": cfg.model,
            "dataset": cfg.dataset,
            "stream": cfg.stream,
            "batch_size": cfg.batch_size,
            "seed": cfg.seed,
            "num_classes": self.dataset.num_classes,
            "device": describe_device(self.device),
            "torch_version": torch.__version__,
            "tracer_version": __version__,
            "warmup_batches": cfg.warmup_batches,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }


class TraceRun(MethodRun):
    """The mutable state of one trace run; :func:`trace_run` is the entry point."""

    def __init__(self, cfg: TraceConfig, echo: Callable[[str], None]):
        super().__init__(cfg, echo)
        self.out_path = cfg.output_dir(device_slug(self.device)) / f"{cfg.file_stem()}.parquet"
        # Last, once every input is known to be good: claim the output path.
        self.writer = TraceWriter(self.out_path, cfg.identity(), cfg.resume, cfg.force)
        self.budgets = BudgetCutoffs(cfg.budgets_ms, cfg.lambda_ms) if cfg.budgets_ms else None

    def frozen_eval(self, episode: Episode, m: int, rows: RowBuffer, base: dict | None = None) -> bool:
        """Score the model frozen after ``m`` steps on later batches; leave every state as found.
        ``base`` is an earlier snapshot to freeze instead of the current state."""
        steps = sample_steps(m, episode.num_batches, self.cfg.frozen_sample)
        if not steps:
            return False
        saved_method = host_snapshot(self.method)
        saved_rng = capture_rng(self.device)
        if base is not None:
            self.method.restore(base)
        self.method.freeze()
        try:
            for j, x, y in self.fetch.iterate(episode, steps):
                domain, _ = episode.locate(j)
                x = x.to(self.device, non_blocking=True)
                ev = timed_event(self.method, x, self.clock, adapt=False)
                rows.add(episode=episode.name, domain=domain.name, severity=domain.severity, phase=schema.PHASE_FROZEN,
                         checkpoint=m, step=j, n=len(y), correct=self._correct(ev.logits, y, domain.name),
                         e_ms=ev.e_ms, l_ms=0.0, delta_ms=ev.e_ms, updated=False, peak_mem_bytes=ev.peak_mem_bytes)
        finally:
            self.method.unfreeze()
            self.method.restore(saved_method)
            restore_rng(saved_rng, self.device)
        return True

    def run_episode(self, index: int, episode: Episode, progress: _Progress) -> RowBuffer:
        cfg = self.cfg
        n_batches = episode.num_batches
        self.start_episode(index, episode)
        schedule = set(default_schedule(n_batches) if cfg.default_checkpoints else []) | {m for m in cfg.checkpoints if m < n_batches}
        done: set[int] = set()
        if self.budgets is not None:
            self.budgets.reset()
        rows = RowBuffer()
        progress.start(episode.name, n_batches)
        for step, x, y in self.fetch.iterate(episode, range(n_batches)):
            domain, _ = episode.locate(step)
            x = x.to(self.device, non_blocking=True)
            if step in schedule and step not in done:
                self.frozen_eval(episode, step, rows)
                done.add(step)
            before = host_snapshot(self.method) if self.budgets is not None and self.budgets.strict_pending else None
            ev = timed_event(self.method, x, self.clock)
            rows.add(episode=episode.name, domain=domain.name, severity=domain.severity, phase=schema.PHASE_ADAPT,
                     checkpoint=schema.NO_CHECKPOINT, step=step, n=len(y), correct=self._correct(ev.logits, y, domain.name),
                     e_ms=ev.e_ms, l_ms=ev.l_ms, delta_ms=ev.e_ms + ev.l_ms, updated=ev.updated, peak_mem_bytes=ev.peak_mem_bytes)
            if self.budgets is not None:
                strict, overshoot = self.budgets.observe(step, ev.e_ms + ev.l_ms)
                for m in strict:
                    if m not in done:
                        self.frozen_eval(episode, m, rows, base=before)
                        done.add(m)
                schedule.update(overshoot)
            progress.advance()
        progress.end()
        return rows

    def metadata(self) -> dict[str, Any]:
        cfg = self.cfg
        return {
            "schema_version": schema.SCHEMA_VERSION,
            **self.run_metadata(),
            "frozen_eval": "all" if cfg.frozen_sample is None else int(cfg.frozen_sample),
        }

    def run(self, on_episode_end: Callable[[int, str], None] | None = None) -> Path:
        progress = _Progress(enabled=not self.cfg.quiet)
        try:
            self.warm_up()
            for i, episode in enumerate(self.episodes):
                if self.writer.is_complete(i):
                    self.echo(summarize(episode.name, self.writer.episode_rows(i)).line() + "  [resumed]")
                    continue
                rows = self.run_episode(i, episode, progress)
                self.writer.write_episode(i, rows)
                self.echo(summarize(episode.name, rows.table()).line())
                if on_episode_end is not None:
                    on_episode_end(i, episode.name)
            return self.writer.finish(self.metadata())
        finally:
            progress.close()
            self.fetch.close()


def trace_run(config: TraceConfig, on_episode_end: Callable[[int, str], None] | None = None,
              echo: Callable[[str], None] | None = None) -> Path:
    """Trace ``config`` and return the path of the written Parquet file.

    ``on_episode_end(index, name)`` runs after each episode's rows are safely on disk (tests
    use it to interrupt a run); ``echo`` receives the one-line episode summaries (default: print
    unless ``config.quiet``).
    """
    cfg = config.resolved()
    if echo is None:
        echo = (lambda s: None) if cfg.quiet else (lambda s: print(s, flush=True))
    return TraceRun(cfg, echo).run(on_episode_end)
