"""One trace run: warm up, stream every episode through the method under the clock, score
frozen checkpoints on the side, write the trace (docs/design/design.md §2, §3, §5).

The adapt path is the same whether or not checkpoints are evaluated: each frozen evaluation
snapshots the method (model, optimiser, extra state) and the RNG states, evaluates, then
restores them, so the rows of the online stream are bit-identical on CPU to a run without
checkpoints. Each episode starts from ``reset()`` and an RNG seeded from ``(seed, episode)``,
which is what makes ``--resume`` and domain subsets reproduce the same rows.

Nothing but the method runs inside a timed event (docs/design/timing.md): batches are staged a chunk
at a time (:mod:`.staging`) and that chunk's events — adapt and frozen alike — run with every
decode thread idle; the garbage collector runs only between events; after a long staging pause
the device is warmed by one untimed frozen forward; and a machine-speed probe runs at each
episode start and every ``--probe-every`` steps, outside the events.

This module holds the run itself (:class:`MethodRun`, :class:`TraceRun`, :func:`trace_run`);
the pieces it shares with the profile and live runs are :mod:`.run_support`, the profile run
is :mod:`.profiling`.
"""

from __future__ import annotations

import importlib
import itertools
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

import tempora_schema as schema
from tempora_toolkit.command_line import visible

from . import __version__
from .checkpoints import BudgetCutoffs, default_schedule, sample_steps
from .config import TraceConfig, check_param_values
from .data import Episode
from .data.folder import MIN_CORRUPTION_SIZE
from .data.streams import domain_seed
from .errors import ConfigError, TraceError
from .heap import FaultTally, apply_heap_policy
from .methods import resolve_method
from .methods.base import MethodContext, TTAMethod
from .methods.lazy_imports import load_pending
from .models import get_model
from .policies import PolicyGate, check_policy_method
from .preprocess import default_preprocess
from .progress import ProgressView
from .run_support import (
    NON_FINITE,
    MethodFailure,
    PredictionError,
    build_episodes,
    capture_rng,
    check_folder_images,
    check_model_fits,
    clean_images,
    host_snapshot,
    left_over_images,
    prediction_problem,
    restore_rng,
    seed_everything,
    summarize,
)
from .staging import BatchStager, StagedBatch, default_workers
from .timing import (
    DeviceClock,
    SpeedProbe,
    collect_between_chunks,
    collect_between_events,
    collector_paused,
    describe_device,
    device_slug,
    resolve_device,
    timed_event,
)
from .variability import VariabilityPlan, parse_idle_gaps
from .variability import measure as measure_variability
from .writer import RowBuffer, TraceWriter

#: A staging pass at least this long (s) is followed by one untimed frozen forward before
#: the next timed event, so no event pays for caches the decoding evicted (docs/design/timing.md).
REWARM_AFTER_S = 0.05


# ------------------------------------------------------------------------ the run
def _failing_phase(exc: BaseException, method: Any) -> str:
    """``predict``, ``adapt`` or ``warm_up_shapes`` when the traceback passes through that
    method of ``method`` (the outermost such frame), else ''."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("predict", "adapt", "warm_up_shapes") and method is not None and frame.f_locals.get("self") is method:
            return frame.f_code.co_name
        tb = tb.tb_next
    return ""


class MethodRun:
    """Device, data, model, method, stager and clock of one run, built and checked once.

    What the tracer (:class:`TraceRun`) and the live runner (:mod:`tempora_trace.live_runner`) share,
    so both time the same events the same way: the same episodes and batch order, the same
    staging and warm-up, the same scoring outside the timed regions.
    """

    def __init__(self, cfg: TraceConfig, echo: Callable[[str], None], identified: Callable[[MethodRun], None] | None = None):
        """``identified`` is called once the run's identity is known, before its data are
        opened: a caller's checks that need the identity but not the data (a live run's λ from
        the group's standard trace) refuse before a stream is staged (a demo stream not yet on
        disk is generated on first use: minutes for all 15 corruptions)."""
        self.cfg = cfg
        self.echo = echo
        self.device = resolve_device(cfg.device)
        self.dataset = cfg.dataset_spec()
        self.method_ref = resolve_method(cfg.method_spec or cfg.method)
        self.method_cls = self.method_ref.cls
        model, self.model_spec = get_model(cfg.model, cfg.weights, num_classes=self.dataset.model_classes, input_size=cfg.input_size)
        check_model_fits(cfg, self.dataset, self.model_spec, self.method_cls)
        if self.dataset.folder:  # the user's images are decoded the way the model's library says
            pre = self.model_spec.preprocess or default_preprocess(self.model_spec.input_size, self.model_spec.family)
            if self.dataset.has_severity and pre.input_size < MIN_CORRUPTION_SIZE:
                raise ConfigError(
                    f"--corruptions needs images of at least {MIN_CORRUPTION_SIZE} px (the ImageNet-C functions' minimum); "
                    f"model '{cfg.model}' takes {pre.input_size} px (--input-size)"
                )
            self.dataset = self.dataset.bind(pre, cfg.seed)
        check_policy_method(self.method_cls, cfg.policy)
        #: the sparse-adaptation policy's gate (None: adapt on every batch), reset per episode
        self.gate = PolicyGate(cfg.policy, cfg.seed) if cfg.policy else None
        torch.set_num_threads(cfg.threads)  # part of the trace identity (resolved() fills the default)
        #: the heap policy in force while events are timed (tempora_trace.heap; metadata ``heap``)
        self.heap = apply_heap_policy(cfg.heap)
        self.identity = cfg.trace_identity(
            self.model_spec.weights_identity, describe_device(self.device), self.method_ref.source.metadata()
        )
        if identified is not None:
            identified(self)
        #: machine-speed probe written to the metadata (docs/reference/trace-schema.md); empty = not measured
        self.speed_probe: list[dict] = []
        self.speed_probe_kind = schema.PROBE_NOT_MEASURED
        root = self.dataset.root(cfg.data_root)
        self.episodes = build_episodes(lambda name, severity: self.dataset.open(name, severity, root), cfg)
        if self.dataset.folder:  # a file that is not an image is refused before anything is written
            check_folder_images(self.episodes)
            for line in left_over_images(self.episodes, cfg):
                print(f"tempora-trace: warning: {visible(line)}", file=sys.stderr, flush=True)
        self.clock = DeviceClock(self.device)
        workers = cfg.workers if cfg.workers is not None else default_workers(os.cpu_count())
        self.stager = BatchStager(workers, pin_memory=self.device.type == "cuda", stage_mb=cfg.stage_mb)
        self.probe = SpeedProbe(self.device)
        self.probes: dict[int, list[dict[str, Any]]] = {}
        #: minor page faults of the main pass's events, counted outside their timed regions
        self.faults = FaultTally()
        self._last_event_end = time.perf_counter()  # when the device last finished a timed event
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = False
        seed_everything(cfg.seed)
        model.to(self.device)
        context = MethodContext(
            num_classes=self.model_spec.num_classes,
            dataset_family=self.dataset.family,
            batch_size=cfg.batch_size,
            device=str(self.device),
            model_name=cfg.model,
            norm_kind=self.model_spec.norm,
            source_images=lambda n, batch_size: clean_images(self.dataset, root, n, batch_size),
        )
        try:
            self.method: TTAMethod = self.method_cls(model, context, **cfg.method_params)
        except (Exception, SystemExit) as exc:  # sys.exit() in user code is an error like any other
            self.method_failed(exc, "construction")
            raise
        # the options it runs with, its own defaults included: finite and writable, before any work
        check_param_values(self.method.hparams(), f"method '{self.method_ref.name}' options (its defaults included)")
        preload_imports(self.method)
        self.masks = {}
        for ep in self.episodes:
            for d in ep.domains:
                if d.class_mask is not None:
                    self.masks[d.name] = torch.as_tensor(d.class_mask, dtype=torch.long, device=self.device)

    def kept(self) -> str:
        """What a run stopped by an error leaves (the end of its one-line message)."""
        return "complete episodes are kept for --resume"

    def method_failed(self, exc: BaseException, where: str, kept: str | None = None) -> None:
        """A method that is not built in raised ``exc`` at ``where`` (an episode and step, the
        warm-up, its construction): raise the one-line :class:`MethodFailure` in its place.
        Does nothing for a built-in (an exception there is a bug in Tempora: its traceback
        stays) or for an error that already is one line (a MethodError about an option)."""
        if self.method_ref.source.builtin or isinstance(exc, TraceError):
            return
        kept = kept if kept is not None else self.kept()
        phase = _failing_phase(exc, getattr(self, "method", None))
        detail = (str(exc).strip().splitlines() or [""])[0]
        raise MethodFailure(
            f"method '{self.method_ref.name}' ({self.method_ref.source.describe()}) raised in {phase + ' at ' if phase else ''}{where}: "
            f"{type(exc).__name__}{': ' + detail if detail else ''}"
            + (f" ({kept}; --debug shows the traceback)" if where != "construction" else " (--debug shows the traceback)")
        ) from exc

    # -- checking and scoring (outside the timed regions)
    def prediction_failed(self, problem: str, where: str, kept: str | None = None) -> PredictionError:
        """The one-line error for a prediction ``problem`` at ``where`` (an episode and step)."""
        kept = kept if kept is not None else self.kept()
        source = "" if self.method_ref.source.builtin else f" ({self.method_ref.source.describe()})"
        return PredictionError(
            f"method '{self.method_ref.name}'{source} returned a prediction at {where} that cannot be scored: {problem} ({kept})"
        )

    def check_prediction(self, logits: Any, n: int, where: str, kept: str | None = None) -> None:
        """Every prediction is ``(n, num_classes)`` real floating-point logits on the run's
        device, every value finite; a one-line :class:`PredictionError` otherwise. Called once
        the event's clock has stopped, never inside it (the finiteness check waits for the device)."""
        problem = prediction_problem(logits, n, self.model_spec.num_classes, self.device)
        if problem is None and not bool(torch.isfinite(logits).all()):
            problem = NON_FINITE
        if problem is not None:
            raise self.prediction_failed(problem, where, kept)

    def count_correct(self, logits: torch.Tensor, labels: torch.Tensor, domain: str) -> torch.Tensor:
        """Correct predictions as a 0-dim tensor on the logits' device, queued without waiting
        for the device (the live runner reads its counts in one transfer per episode)."""
        logits = logits.detach()
        if domain in self.masks:
            logits = logits[:, self.masks[domain].to(logits.device)]
        return (logits.argmax(1) == labels.to(logits.device)).sum()

    def _correct(self, logits: torch.Tensor, labels: torch.Tensor, domain: str) -> int:
        return int(self.count_correct(logits, labels, domain))

    def warm_up(self) -> None:
        """Five noise-perturbed copies of the first batch through predict+adapt, the method's
        other shapes (:meth:`~tempora_trace.methods.base.TTAMethod.warm_up_shapes`) and one
        frozen predict, then reset() — so lazy initialisation never lands in a timed row."""
        if self.cfg.warmup_batches == 0:
            return
        x = self.stager.stage(self.episodes[0], [0])[0].x.to(self.device)
        gen = torch.Generator(device="cpu").manual_seed(self.cfg.seed)
        try:
            for _ in range(self.cfg.warmup_batches):
                noisy = (x.cpu() + 0.25 * torch.randn(x.shape, generator=gen)).to(self.device)
                self.check_prediction(timed_event(self.method, noisy, self.clock).logits, len(x), "the warm-up")
            self.method.warm_up_shapes(x)
            self.method.freeze()
            self.check_prediction(timed_event(self.method, x, self.clock, adapt=False).logits, len(x), "the warm-up")
            self.method.unfreeze()
            self.method.reset()
        except (Exception, SystemExit) as exc:
            self.method_failed(exc, "the warm-up")
            raise
        self._last_event_end = time.perf_counter()

    def start_episode(self, index: int, episode: Episode) -> None:
        """Reset where the stream says so (each episodic episode, the first continual one) and
        seed the RNGs from ``(seed, episode)``, so every run of an episode starts alike."""
        if schema.resets_per_episode(self.cfg.stream) or index == 0:
            self.method.reset()
        seed_everything(domain_seed(self.cfg.seed, episode.name))
        if self.gate is not None:
            self.gate.start_episode(episode.name)

    def run_metadata(self) -> dict[str, Any]:
        """The metadata every Tempora file about this run carries (trace and live run alike)."""
        cfg = self.cfg
        return {
            **self.identity.as_metadata(),
            "method_params": self.method.hparams(),
            "num_classes": self.dataset.num_classes,
            "torch_version": torch.__version__,
            "tracer_version": __version__,
            "warmup_batches": cfg.warmup_batches,
            "heap": self.heap,
            **self.provenance(),
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    def provenance(self) -> dict[str, Any]:
        """Where a model by spec and a folder dataset came from (library and version, weights,
        preprocessing, files and their hashes): in the metadata and the resume identity, and
        absent for the built-ins, whose names say it all."""
        out: dict[str, Any] = {}
        spec = self.model_spec
        if spec.source is not None:
            out["model_source"] = {
                "spec": str(self.cfg.model),
                **spec.source,
                "weights": spec.weights_identity,
                "norm": spec.norm_profile,
                "num_classes": spec.num_classes,
                **({"preprocess": spec.preprocess.as_metadata()} if spec.preprocess is not None else {}),
            }
        if self.dataset.source is not None:
            pre = self.dataset.preprocess
            out["dataset_source"] = {**self.dataset.source, **({"preprocess": pre.as_metadata()} if pre is not None else {})}
        return out

    def _staged(self, episode: Episode, steps: Sequence[int]):
        """``steps`` as staged chunks, each followed (before its first event) by a full garbage
        collection and, when staging paused the device long enough, one untimed forward."""
        for chunk in self.stager.chunks(episode, steps):
            collect_between_chunks()
            if time.perf_counter() - self._last_event_end >= REWARM_AFTER_S:
                self._rewarm(chunk[0].x)
            yield chunk

    def _rewarm(self, x: torch.Tensor) -> None:
        """One untimed frozen forward on ``x``, every state and RNG restored after it (the
        frozen-evaluation discipline), so the next timed event finds weights and kernels hot."""
        was_frozen = self.method.frozen  # inside a frozen evaluation: stay frozen after
        saved_method = host_snapshot(self.method)
        saved_rng = capture_rng(self.device)
        self.method.freeze()
        try:
            with torch.no_grad():
                self.method.predict(x.to(self.device))
            self.clock.sync()
        finally:
            if not was_frozen:
                self.method.unfreeze()
            self.method.restore(saved_method)
            restore_rng(saved_rng, self.device)
        self._last_event_end = time.perf_counter()


class TraceRun(MethodRun):
    """The mutable state of one trace run; :func:`trace_run` is the entry point."""

    def __init__(
        self, cfg: TraceConfig, echo: Callable[[str], None], claim: bool = True, identified: Callable[[MethodRun], None] | None = None
    ):
        super().__init__(cfg, echo, identified)
        self.out_path = cfg.output_dir(device_slug(self.device)) / f"{cfg.file_stem()}.parquet"
        self.budgets = BudgetCutoffs(cfg.budgets_ms, cfg.lambda_ms) if cfg.budgets_ms else None
        self.writer: TraceWriter | None = None
        #: step → staged batch of the chunk being traced (frozen evaluations reuse them)
        self._chunk_at: dict[int, StagedBatch] = {}
        #: the id of the live run this trace was taken alongside (metadata ``taken_alongside``)
        self.alongside_of: str | None = None
        #: timing variability measured after the main pass (metadata ``timing_variability``)
        self.timing_variability: dict | None = None
        if claim:
            self.claim_output()

    def kept(self) -> str:
        if self.writer is None or not self.writer.completed:
            return "nothing written"
        return "complete episodes are kept for --resume"

    def claim_output(self, option: str = "--out") -> None:
        """Last, once every input is known to be good: claim the output path (a caller with
        more inputs to check, like a live run tracing alongside, claims it later). ``option``
        is the flag that named the output folder, for messages."""
        self.writer = TraceWriter(
            self.out_path, {**self.cfg.identity(self.identity), **self.provenance()}, self.cfg.resume, self.cfg.force, option
        )

    def _maybe_probe(self, episode_index: int, episode: Episode, step: int) -> None:
        if step % self.cfg.probe_every == 0:
            self.probes.setdefault(episode_index, []).append(
                {"episode": episode.name, "step": int(step), "ms": round(self.probe.measure(), 4)}
            )

    def frozen_eval(self, episode: Episode, m: int, rows: RowBuffer, base: dict | None = None) -> bool:
        """Score the model frozen after ``m`` steps on later batches; leave every state as found.
        ``base`` is an earlier snapshot to freeze instead of the current state."""
        steps = sample_steps(m, episode.num_batches, self.cfg.frozen_sample)
        if not steps:
            return False
        # batches of the chunk being traced are already in host memory: reuse the leading
        # steps found there (evaluation stays in step order) and stage only the rest
        k = 0
        while k < len(steps) and steps[k] in self._chunk_at:
            k += 1
        held, rest = [self._chunk_at[s] for s in steps[:k]], steps[k:]
        saved_method = host_snapshot(self.method)
        saved_rng = capture_rng(self.device)
        if base is not None:
            self.method.restore(base)
        self.method.freeze()
        try:
            for chunk in itertools.chain([held] if held else [], self._staged(episode, rest) if rest else []):
                for b in chunk:
                    domain, _ = episode.locate(b.step)
                    x = b.x.to(self.device, non_blocking=True)
                    try:
                        ev = timed_event(self.method, x, self.clock, adapt=False)
                    except (Exception, SystemExit) as exc:
                        self.method_failed(exc, f"episode {episode.name} step {b.step} (frozen after {m} steps)")
                        raise
                    self.check_prediction(ev.logits, len(b.y), f"episode {episode.name} step {b.step} (frozen after {m} steps)")
                    rows.add(
                        episode=episode.name,
                        domain=domain.name,
                        severity=domain.severity,
                        phase=schema.PHASE_FROZEN,
                        checkpoint=m,
                        step=b.step,
                        n=len(b.y),
                        correct=self._correct(ev.logits, b.y, domain.name),
                        e_ms=ev.e_ms,
                        l_ms=0.0,
                        delta_ms=ev.e_ms,
                        updated=False,
                        peak_mem_bytes=ev.peak_mem_bytes,
                    )
                    self._last_event_end = time.perf_counter()
                    del ev, x
                    collect_between_events()
        finally:
            self.method.unfreeze()
            self.method.restore(saved_method)
            restore_rng(saved_rng, self.device)
        return True

    def run_episode(self, index: int, episode: Episode, progress: ProgressView) -> RowBuffer:
        cfg = self.cfg
        n_batches = episode.num_batches
        self.start_episode(index, episode)
        schedule = set(default_schedule(n_batches) if cfg.default_checkpoints else []) | {m for m in cfg.checkpoints if m < n_batches}
        done: set[int] = set()
        if self.budgets is not None:
            self.budgets.reset()
        rows = RowBuffer()
        self.probes[index] = []
        progress.start(episode.name, n_batches)
        for chunk in self._staged(episode, range(n_batches)):
            self._chunk_at = {b.step: b for b in chunk}
            for b in chunk:
                self._step(index, episode, b, schedule, done, rows)
                progress.advance()
        self._chunk_at = {}
        progress.end()
        return rows

    def _step(self, index: int, episode: Episode, b: StagedBatch, schedule: set[int], done: set[int], rows: RowBuffer) -> None:
        """Checkpoints due before step ``b.step``, the probe, then the step's timed event."""
        step = b.step
        domain, _ = episode.locate(step)
        if step in schedule and step not in done:
            self.frozen_eval(episode, step, rows)
            done.add(step)
        self._maybe_probe(index, episode, step)
        before = host_snapshot(self.method) if self.budgets is not None and self.budgets.strict_pending else None
        x = b.x.to(self.device, non_blocking=True)
        self.faults.before()
        try:
            ev = timed_event(self.method, x, self.clock, gate=self.gate)
        except (Exception, SystemExit) as exc:
            self.method_failed(exc, f"episode {episode.name} step {step}")
            raise
        self.faults.after()
        self._last_event_end = time.perf_counter()
        self.check_prediction(ev.logits, len(b.y), f"episode {episode.name} step {step}")  # the clock has stopped
        rows.add(
            episode=episode.name,
            domain=domain.name,
            severity=domain.severity,
            phase=schema.PHASE_ADAPT,
            checkpoint=schema.NO_CHECKPOINT,
            step=step,
            n=len(b.y),
            correct=self._correct(ev.logits, b.y, domain.name),
            e_ms=ev.e_ms,
            l_ms=ev.l_ms,
            delta_ms=ev.e_ms + ev.l_ms,
            updated=ev.updated,
            peak_mem_bytes=ev.peak_mem_bytes,
        )
        delta = ev.e_ms + ev.l_ms
        del ev, x
        collect_between_events()
        if self.budgets is not None:
            strict, overshoot = self.budgets.observe(step, delta)
            for m in strict:
                if m not in done:
                    self.frozen_eval(episode, m, rows, base=before)
                    done.add(m)
            schedule.update(overshoot)

    def measure_variability(self) -> None:
        """Time a sample of the stream again after the main pass (:mod:`.variability`)."""
        gaps = parse_idle_gaps(self.cfg.idle_gaps)
        plan = VariabilityPlan(self.cfg.timing_sample, self.cfg.timing_passes, gaps, self.cfg.idle_settle)
        if plan.enabled:
            if gaps:
                run_in = f", {2 * len(gaps)} after a {plan.settle_s:g} s run-in" if plan.settle_s > 0 else ""
                self.echo(f"timing variability: repeat passes, then {2 * len(gaps) + 1} idle blocks{run_in}")
            self.timing_variability = measure_variability(self, plan)
            if self.timing_variability is not None:
                tv = self.timing_variability
                blocks = schema.idle_blocks(tv)
                self.echo(
                    f"timing variability: {len(tv['passes_ms'])} repeat pass(es) and "
                    f"{f'{len(blocks)} idle blocks' if blocks else 'no idle blocks'} over {schema.sample_size(tv)} events, {tv['seconds']:.1f} s"
                )

    def metadata(self) -> dict[str, Any]:
        cfg = self.cfg
        return {
            "schema_version": schema.SCHEMA_VERSION,
            **self.run_metadata(),
            "frozen_eval": "all" if cfg.frozen_sample is None else int(cfg.frozen_sample),
            "speed_probe": [p for i in sorted(self.probes) for p in self.probes[i]],
            "speed_probe_kind": self.probe.kind,
            **({"taken_alongside": self.alongside_of} if self.alongside_of else {}),
            **({schema.VARIABILITY_KEY: self.timing_variability} if self.timing_variability else {}),
            **({schema.HEAP_FAULTS_KEY: faults} if (faults := self.faults.summary()) else {}),
        }

    def run(self, on_episode_end: Callable[[int, str], None] | None = None) -> Path:
        progress = ProgressView(enabled=not self.cfg.quiet)
        try:
            with collector_paused():
                self.warm_up()
                for i, episode in enumerate(self.episodes):
                    if self.writer.is_complete(i):
                        self.probes[i] = self.writer.episode_probes(i)
                        self.echo(summarize(episode.name, self.writer.episode_rows(i)).line() + "  [resumed]")
                        continue
                    t0 = time.perf_counter()
                    rows = self.run_episode(i, episode, progress)
                    wall = time.perf_counter() - t0
                    self.writer.write_episode(i, rows, self.probes[i])
                    self.echo(summarize(episode.name, rows.table()).line() + f"  {wall:.1f} s")
                    if on_episode_end is not None:
                        on_episode_end(i, episode.name)
                self.measure_variability()
            meta = self.metadata()
            path = self.writer.finish(meta)
            warn_if_the_machine_moved(meta)
            return path
        except TraceError:
            # refused mid-run (a method that raised, a prediction that cannot be scored) before
            # any episode was complete: nothing to resume, so nothing stays behind
            if not self.writer.completed and not self.cfg.resume:
                self.writer.discard()
            raise
        finally:
            progress.close()
            self.stager.close()
            self.writer.close()  # releases the output lock, however the run ended


def warn_if_the_machine_moved(meta: dict[str, Any]) -> None:
    """One warning line on stderr when a written trace's (or profile's) own speed probes show
    the machine changing speed while it ran (:func:`tempora_schema.probe_drift`): its times
    mix two speeds, which no comparison by median probe would show."""
    drift = schema.probe_drift(meta)
    if drift is None or not drift.moved:
        return
    what = "profile" if meta.get(schema.KIND_KEY) == schema.KIND_PROFILE else "trace"
    print(
        f"tempora-trace: warning: the machine's speed moved {100 * drift.change:.0f} % during this {what} "
        f"(medians of three successive speed probes, {drift.fast_ms:.2f}–{drift.slow_ms:.2f} ms): its times "
        "mix two speeds of the machine; take it again while the machine holds its speed",
        file=sys.stderr,
        flush=True,
    )


def preload_optimiser_imports(method: TTAMethod) -> None:
    """torch's optimisers import ``torch._dynamo`` on their first step (about 1.2 s on a CPU).
    A method that holds an optimiser has it imported here, before any clock runs, so that no
    first step pays for it inside a timed event: with ``--warmup-batches 0``, or when a
    method's filter kept no sample of the warm-up batches. A method without one (``standard``)
    never imports it."""
    optimiser = getattr(method, "optimizer", None)  # SAR's is a wrapper (SAM) around one
    if optimiser is not None or any(isinstance(v, torch.optim.Optimizer) for v in vars(method).values()):
        importlib.import_module("torch._dynamo")


def preload_imports(method: TTAMethod) -> None:
    """Everything ``method``'s first event would import, imported now, before any clock runs:
    ``torch._dynamo`` for a method that holds an optimiser, and the modules that method modules
    import on use (:mod:`tempora_trace.methods.lazy_imports`: torchvision's transforms)."""
    preload_optimiser_imports(method)
    load_pending()


def trace_run(
    config: TraceConfig, on_episode_end: Callable[[int, str], None] | None = None, echo: Callable[[str], None] | None = None
) -> Path:
    """Trace ``config`` and return the path of the written Parquet file.

    ``on_episode_end(index, name)`` runs after each episode's rows are safely on disk (tests
    use it to interrupt a run); ``echo`` receives the one-line episode summaries (default: print
    unless ``config.quiet``).
    """
    cfg = config.resolved()
    if echo is None:
        echo = (lambda s: None) if cfg.quiet else (lambda s: print(s, flush=True))
    return TraceRun(cfg, echo).run(on_episode_end)
