"""Live protocol runs: the method against a real clock, to check what the replay claims.

``tempora-sim`` replays traces; this module plays the same protocols for real, so
``tempora-sim validate`` can put a replay and a live run side by side (``docs/guide/validation.md``).

**Discrete** (ρ or γ, queue b): batch i becomes available at ``t0 + i·γ`` on the tracer's
monotonic clock (:data:`~tempora_trace.timing.now_ns`). Whenever the pipeline is free it
reads the clock once and decides with the replay's own rule (:mod:`tempora_schema.discrete`:
:func:`last_arrival`, :func:`next_pick`, which the kernels compile) which batches have arrived: every arrival up to that reading is enqueued first (the oldest evicted from a
full queue), then the oldest queued batch is taken — the replay's order at equal times
(completion, arrival, pickup). With nothing queued it waits for the next arrival (sleep,
then spin) and takes it; with b = 0 only a batch arriving while the pipeline is free is
taken. After the last arrival the queue drains. Arrivals need no producer thread: they are
instants on the clock, and the batches are already staged, so nothing competes with the
measured computation.

**Amortised** (budget B): batches back to back; each adapting event charges
``c = max(0, δ − λ)``; at the cut-off the method freezes for the rest of the episode. Rule
``overshoot`` adapts while the overhead spent before a batch is below B; rule ``strict``
(m = max{j : Σc ≤ B}) only learns that a step went over B after running it, so it keeps a
host snapshot of the state before each step (outside the timed regions, as the tracer does),
undoes that step, and predicts its batch with the frozen model.

Everything shares the tracer's house: :class:`~tempora_trace.runner.MethodRun` builds the
data, model, method and clock and warms up, :func:`~tempora_trace.timing.timed_event` times
every event (the same syncs, so ``e_ms``/``l_ms`` mean what they mean in a trace), and scoring
happens outside the timed regions. Batches are staged before an episode's clock starts; an
episode larger than ``stage_mb`` is staged in chunks, and the episode clock is paused while a
chunk stages (at a pickup, after the decision), so staging never shifts an arrival relative
to the events.

This module holds the runner (:class:`LiveRun`, :func:`run_live`) and its output (the
live-run file, its rows and metadata). The two protocols on the clock are
:mod:`tempora_trace.live_clock`; the settings, λ and the plan of runs are
:mod:`tempora_trace.live_settings`.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from tempora_schema.live import (
    LIVE_COLUMNS,
    LIVE_SCHEMA_VERSION,
    live_arrow_schema,
    validate_live_table,
)
from tempora_toolkit.atomic_files import (
    check_output_dir,
    output_lock,
    to_bytes,
    trace_folder_above,
    write_file,
)

from .checkpoints import BudgetCutoffs
from .config import TraceConfig, path_part
from .errors import ConfigError, OutputError
from .live_clock import (
    AmortisedHooks,
    PrepareFn,
    Served,
    ServeFn,
    last_arrival,
    play_amortised,
    play_discrete,
)
from .live_settings import LiveSettings, RunPlan, plan_runs, standard_trace_lambda
from .progress import ProgressView
from .run_support import NON_FINITE, capture_rng, host_snapshot, prediction_problem, restore_rng, summarize
from .runner import REWARM_AFTER_S, MethodRun, TraceRun, warn_if_the_machine_moved
from .timing import (
    Event,
    clock_resolution_ns,
    collect_between_chunks,
    collect_between_events,
    collector_paused,
    device_slug,
    now_ns,
    resolve_device,
    timed_event,
)
from .writer import remove_empty_folders


# ------------------------------------------------------------------------ the run
class HeldScores:
    """Scoring kept out of the pipeline's busy time.

    Whatever runs between an event's end and the next decision is busy time the replay does
    not know about, and scoring a batch (a few small kernels) was most of it. So an event's
    logits are only held (detached: the method's graph goes) and scored against the staged
    labels while the episode clock stands still — at a staging pause and after the episode.
    Held logits are a few hundred KB a batch, far less than the staged inputs beside them.
    A batch held twice (the strict rule's undone step, then its frozen prediction) keeps the
    last.

    The prediction is checked there too, never between an event and the next decision:
    ``problem(logits, n)`` (the tracer's shape, dtype and device check, which reads only the
    tensor's attributes) when a batch is scored, and its values' finiteness queued beside the
    count and read in the same transfer; ``failed(problem, where)`` makes the one-line error."""

    def __init__(
        self,
        count_correct: Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor],
        problem: Callable[[Any, int], str | None] | None = None,
        failed: Callable[[str, str], Exception] | None = None,
    ):
        self.count_correct = count_correct
        self.problem = problem
        self.failed = failed
        self.episode: Any = None
        self.held: dict[int, tuple[Any, torch.Tensor]] = {}
        self.counts: dict[int, torch.Tensor] = {}
        self.finite: dict[int, torch.Tensor] = {}

    def start(self, episode) -> None:
        """Hold the batches of ``episode`` from now on (whose domains name their class masks)."""
        self.episode = episode
        self.held.clear()
        self.counts.clear()
        self.finite.clear()

    def hold(self, step: int, logits: Any, labels: torch.Tensor) -> None:
        self.held[step] = (logits.detach() if isinstance(logits, torch.Tensor) else logits, labels)

    def _refuse(self, problem: str, step: int) -> None:
        if self.failed is not None:
            raise self.failed(problem, f"episode {self.episode.name} step {step}")

    def score_held(self) -> None:
        """Check and score every held batch (queued on the device) and let its logits go."""
        for step, (logits, labels) in self.held.items():
            problem = self.problem(logits, len(labels)) if self.problem is not None else None
            if problem is not None:
                self._refuse(problem, step)
            self.counts[step] = self.count_correct(logits, labels, self.episode.locate(step)[0].name)
            if self.problem is not None:
                self.finite[step] = torch.isfinite(logits).all()
        self.held.clear()

    def take(self) -> dict[int, int]:
        """Every count since the last take, read from the device in one transfer (with the
        finiteness of each prediction, when checked)."""
        self.score_held()
        steps = list(self.counts)
        flags = [self.finite[s].to(torch.long) for s in steps if s in self.finite]
        values = torch.stack([self.counts[s] for s in steps] + flags).tolist() if steps else []
        self.counts.clear()
        self.finite.clear()
        if flags:
            bad = [s for s, ok in zip(steps, values[len(steps) :]) if not ok]
            if bad:
                self._refuse(NON_FINITE, min(bad))
        return dict(zip(steps, (int(v) for v in values[: len(steps)])))


@dataclass
class RunTally:
    """What one run has played so far, summed over its episodes."""

    num_batches: int = 0
    served: int = 0
    #: Σ correct/n over the served batches
    served_correct_frac: float = 0.0
    #: amortised: the cut-off and the overhead spent, per episode
    m: dict[str, int] = field(default_factory=dict)
    spent_ms: dict[str, float] = field(default_factory=dict)
    wall_ns: int = 0
    #: the machine-speed probe (ms), once before each of its episodes: outside every timed
    #: region, so ``validate`` can tell the machine's speed during the run from the trace's
    probes_ms: list[float] = field(default_factory=list)


class LiveRun:
    """One ``tempora-trace live`` invocation: every planned run over every episode.

    Episodes are the outer loop: each episode is played under every planned run before the
    next one starts, so the runs of one setting (repeats) and, with ``trace_alongside``, the
    episode's trace pass are minutes apart at most. The trace pass goes before the live runs
    on even episodes and after them on odd ones, so a machine that drifts slowly in speed
    shifts neither side of the comparison on average.
    """

    def __init__(self, cfg: TraceConfig, settings: LiveSettings, echo: Callable[[str], None]):
        self.cfg = cfg
        self.settings = settings
        self.echo = echo
        self.out_path = self._out_path(resolve_device(cfg.device))
        self.tracing = settings.trace_alongside is not None
        if self.tracing:
            # the tracer's own run (a MethodRun too): the trace pass and the live runs share
            # the model, the method, the stager and the clock
            self.base: MethodRun = TraceRun(
                dataclasses.replace(cfg, out=str(settings.trace_alongside)), echo, claim=False, identified=self._plan
            )
        else:
            self.base = MethodRun(cfg, echo, identified=self._plan)
        #: names this invocation: its trace alongside carries the same id (``taken_alongside``)
        self.run_id = uuid.uuid4().hex
        if self.tracing:
            if Path(self.lambda_source).resolve() == self.base.out_path.resolve():
                raise ConfigError(
                    f"--trace-alongside would overwrite {self.lambda_source}, the standard trace λ comes from; "
                    "write the trace to another folder"
                )
            if settings.budget_checkpoints:
                self.base.budgets = BudgetCutoffs(settings.budgets_ms, self.lambda_ms)
                self.base.cfg = dataclasses.replace(self.base.cfg, budgets_ms=self.base.budgets.budgets, lambda_ms=self.lambda_ms)
            self.base.claim_output("--trace-alongside")
            self.base.alongside_of = self.run_id
        #: the live rows, one column buffer per run (written run by run)
        self.columns: dict[int, dict[str, list]] = {p.run: {name: [] for name in LIVE_COLUMNS} for p in self.plans}
        self.staged: dict[int, tuple[Any, Any]] = {}
        self.staged_episode: str | None = None
        base = self.base
        self.scores = HeldScores(
            base.count_correct,
            lambda logits, n: prediction_problem(logits, n, base.model_spec.num_classes, base.device),
            lambda problem, where: base.prediction_failed(problem, where, kept="nothing written: a live run is written whole"),
        )
        self.pauses = 0
        self.trace_path: Path | None = None

    def _plan(self, base: MethodRun) -> None:
        """λ (from ``--lambda-ms`` or the group's standard trace) and the runs it sets, as soon
        as the group is known: a missing λ or a schedule beyond the bound is refused before
        any data are staged or anything is claimed."""
        settings = self.settings
        if settings.lambda_ms is not None:
            self.lambda_ms, self.lambda_source = float(settings.lambda_ms), "--lambda-ms"
        else:
            self.lambda_ms, self.lambda_source, warning = standard_trace_lambda(
                self.cfg, base.identity.group, settings.standard, settings.lambda_rule
            )
            if warning:
                print(warning, file=sys.stderr, flush=True)
        self.plans = plan_runs(settings, self.lambda_ms)

    def _out_path(self, device) -> Path:
        cfg = self.cfg
        folder = (
            Path(cfg.out).expanduser()
            if cfg.out is not None
            else Path("live") / path_part(cfg.dataset_label()) / path_part(cfg.model_label()) / device_slug(device)
        )
        path = folder / f"{cfg.file_stem()}.live.parquet"
        if path.exists() and not cfg.force:
            raise OutputError(f"{path} already exists; pass --force to overwrite it or --name to write another file")
        return path

    # -- staging: the tracer's stager, batches on the device before the clock starts
    def _stage_from(self, episode, start: int) -> int:
        """Stage batches ``start..`` of ``episode`` — as many as fit in ``--stage-mb`` — onto the
        device, with every decode finished before it returns; return the ns it took."""
        t = now_ns()
        self.scores.score_held()  # before the labels they are scored against go
        self.staged.clear()
        self.staged_episode = episode.name
        stager = self.base.stager
        first = stager.stage(episode, [start])
        length = stager.chunk_length(first[0].nbytes)
        batches = first + stager.stage(episode, range(start + 1, min(episode.num_batches, start + length)))
        for b in batches:
            self.staged[b.step] = (b.x.to(self.base.device), b.y.to(self.base.device))
        del first, batches
        collect_between_chunks()
        if time.perf_counter() - self.base._last_event_end >= REWARM_AFTER_S:
            self.base._rewarm(self.staged[start][0])  # as the tracer does after a staging pause
        self.base.clock.sync()
        return now_ns() - t

    def _prepare(self, episode) -> PrepareFn:
        def prepare(i: int) -> int:
            if i in self.staged:
                return 0
            self.pauses += 1
            return self._stage_from(episode, i)

        return prepare

    def _server(self, episode, adapt: bool) -> ServeFn:
        base = self.base

        def serve(i: int) -> tuple[Event, Any]:
            x, y = self.staged[i]
            try:
                ev = timed_event(base.method, x, base.clock, adapt=adapt, peak=False, gate=base.gate)
            except (Exception, SystemExit) as exc:
                base.method_failed(exc, f"episode {episode.name} step {i}", kept="nothing written: a live run is written whole")
                raise
            base._last_event_end = time.perf_counter()
            # nothing between an event's end and the next decision but holding its logits:
            # scoring waits for the clock to stand still, garbage collection for an idle wait
            self.scores.hold(i, ev.logits, y)
            ev.logits = None  # the event's graph goes before the next one (as in the tracer)
            return ev, None

        return serve

    # -- rows
    def _add_rows(self, plan: RunPlan, episode, outcome: Sequence[Served | None]) -> None:
        c = self.columns[plan.run]
        for i, s in enumerate(outcome):
            domain, idx = episode.locate(i)
            row = {
                "run": plan.run,
                "episode": episode.name,
                "domain": domain.name,
                "severity": domain.severity,
                "step": i,
                "n": len(idx),
                "served": s is not None,
                "event": -1 if s is None else s.event,
                "mode": "skipped" if s is None else s.mode,
                "correct": None if s is None else s.correct,
                "arrival_ms": i * plan.gamma_ms if plan.protocol == "discrete" else None,
                "pickup_ms": None,
                "predict_ms": None,
                "free_ms": None,
                "e_ms": None,
                "l_ms": None,
                "delta_ms": None,
                "charged_ms": None,
                "spent_ms": None,
                "peak_mem_bytes": None,
            }
            if s is not None:
                row.update(
                    pickup_ms=s.pickup_ms,
                    predict_ms=s.predict_ms,
                    free_ms=s.free_ms,
                    e_ms=s.ev.e_ms,
                    l_ms=s.ev.l_ms,
                    delta_ms=s.ev.e_ms + s.ev.l_ms,
                    charged_ms=s.charged_ms,
                    spent_ms=s.spent_ms,
                    peak_mem_bytes=s.ev.peak_mem_bytes,
                )
            for k, v in row.items():
                c[k].append(v)

    # -- the strict rule's undo: a host copy of the state before each step (outside the timed regions)
    def _save(self) -> Any:
        return host_snapshot(self.base.method), capture_rng(self.base.device)

    def _undo(self, saved: Any) -> None:
        self.base.method.restore(saved[0])
        restore_rng(saved[1], self.base.device)

    # -- one episode of one run
    def play_episode(self, plan: RunPlan, index: int, episode, tally: RunTally) -> None:
        """Play ``episode`` under ``plan`` from the state the stream prescribes (reset per
        episode, or at the first of a continual stream) and add its rows and totals."""
        base = self.base
        t0 = now_ns()
        base.start_episode(index, episode)
        n = episode.num_batches
        self.scores.start(episode)
        if self.staged_episode == episode.name and len(self.staged) == n:  # still on the device from its previous run
            collect_between_chunks()
        else:
            self._stage_from(episode, 0)
        prepare = self._prepare(episode)
        if plan.protocol == "discrete":
            outcome = play_discrete(
                n,
                plan.gamma_ms,
                plan.queue,
                self._server(episode, True),
                prepare,
                int(self.settings.spin_us * 1000),
                collect_between_events,
            )
        else:
            hooks = AmortisedHooks(self._server(episode, True), self._server(episode, False), self._save, self._undo, base.method.freeze)
            outcome, m = play_amortised(n, self.lambda_ms, plan.budget_ms, plan.budget_rule, hooks, prepare)
            if base.method.frozen:
                base.method.unfreeze()
            tally.m[episode.name] = m
            tally.spent_ms[episode.name] = outcome[-1].spent_ms if outcome else 0.0
        counts = self.scores.take()
        for i, s in enumerate(outcome):
            if s is not None:
                s.correct = counts[i]
                tally.served += 1
                tally.served_correct_frac += s.correct / len(episode.locate(i)[1])
        self._add_rows(plan, episode, outcome)
        tally.num_batches += n
        tally.wall_ns += now_ns() - t0

    def trace_episode(self, index: int, episode) -> None:
        """The episode's trace pass (``trace_alongside``): the tracer's own loop, checkpoints
        included, its rows on disk before the next episode."""
        base = self.base
        t0 = time.perf_counter()
        rows = base.run_episode(index, episode, ProgressView(enabled=False))
        base.writer.write_episode(index, rows, base.probes[index])
        self.echo(f"trace  {summarize(episode.name, rows.table()).line()}  {time.perf_counter() - t0:.1f} s")

    def summarise(self, plan: RunPlan, tally: RunTally) -> None:
        served, total = tally.served, tally.num_batches
        acc_sum = tally.served_correct_frac
        plan.summary = {
            "num_batches": total,
            "served": served,
            "alpha": served / total,
            "served_acc": acc_sum / served if served else None,
            "utility": acc_sum / total,
            "wall_s": tally.wall_ns / 1e9,
            "speed_probe_ms": tally.probes_ms,
        }
        if plan.protocol == "amortised":
            plan.summary.update(m=tally.m, spent_ms=tally.spent_ms)
        line = f"run {plan.run} (repeat {plan.repeat}) {plan.label()}: "
        if plan.protocol == "discrete":
            line += f"α {100 * plan.summary['alpha']:6.2f}%  served acc {100 * (plan.summary['served_acc'] or 0):6.2f}%  "
        else:
            line += f"m {np.mean(list(tally.m.values())):.1f}/{total / len(self.base.episodes):.0f}  "
        line += f"U {100 * plan.summary['utility']:6.2f}%  ({plan.summary['wall_s']:.1f} s)"
        self.echo(line)

    def metadata(self) -> dict[str, Any]:
        return {
            "live_schema_version": LIVE_SCHEMA_VERSION,
            **self.base.run_metadata(),
            "lambda_ms": self.lambda_ms,
            "lambda_source": self.lambda_source,
            # the rule λ was computed with, where it came from a standard trace
            **({} if self.settings.lambda_ms is not None else {"lambda_rule": self.settings.lambda_rule}),
            "clock": "time.perf_counter_ns",
            "clock_resolution_ns": clock_resolution_ns(),
            "spin_us": float(self.settings.spin_us),
            "stage_mb": float(self.cfg.stage_mb),
            "stage_pauses": self.pauses,
            "run_id": self.run_id,
            # what each run's 'speed_probe_ms' timed (the trace's probe: the two compare)
            "speed_probe_kind": self.base.probe.kind,
            # the trace taken in this run, episode by episode beside the live runs (file name; its
            # metadata 'taken_alongside' is this run_id), or None
            "trace_alongside": None if self.trace_path is None else self.trace_path.name,
            "runs": [p.params() for p in self.plans],
        }

    def _play_all(self) -> None:
        tallies = {p.run: RunTally() for p in self.plans}
        for index, episode in enumerate(self.base.episodes):
            trace_first = index % 2 == 0
            if self.tracing and trace_first:
                self.trace_episode(index, episode)
            t0 = time.perf_counter()
            for plan in self.plans:
                tallies[plan.run].probes_ms.append(round(self.base.probe.measure(), 4))
                self.play_episode(plan, index, episode, tallies[plan.run])
            self.staged.clear()  # an episode that fitted in one chunk was staged once for all its runs
            self.echo(f"live   {episode.name:<20} {len(self.plans)} run(s)  {time.perf_counter() - t0:.1f} s")
            if self.tracing and not trace_first:
                self.trace_episode(index, episode)
        for plan in self.plans:
            self.summarise(plan, tallies[plan.run])

    def run(self) -> Path:
        made = [p for p in (self.out_path.parent, *self.out_path.parent.parents) if not p.exists()]
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with output_lock(self.out_path, "live run"):
                try:
                    last_arrival(1.0, 1.0)  # compile / load the kernel function now, not at the first decision
                    with collector_paused():  # the collector runs between events only, as in a trace
                        self.base.warm_up()
                        self._play_all()
                        if self.tracing:  # the trace's timing variability, after every live run
                            self.base.measure_variability()
                finally:
                    self.base.stager.close()
                if self.tracing:
                    trace_meta = self.base.metadata()
                    self.trace_path = self.base.writer.finish(trace_meta)
                    self.echo(f"wrote {self.trace_path}")
                    warn_if_the_machine_moved(trace_meta)
                meta = self.metadata()
                columns = {name: [v for p in self.plans for v in self.columns[p.run][name]] for name in LIVE_COLUMNS}
                table = pa.table(columns, schema=live_arrow_schema(meta))
                validate_live_table(table, meta, self.out_path)  # never publish a file the reader rejects
                return write_file(self.out_path, to_bytes(lambda f: pq.write_table(table, f)))
        except BaseException:
            if self.tracing:
                # a live run cannot be resumed, so neither can its trace alongside: nothing of it stays
                self.base.writer.discard()
            if not self.out_path.exists():
                remove_empty_folders(made)
            raise
        finally:
            if self.tracing:
                self.base.writer.close()


def check_live_out(cfg: TraceConfig, settings: LiveSettings) -> None:
    """A live run's ``--out`` must not be a trace folder (or inside one, or inside the
    ``--trace-alongside`` folder): the next sweep of that folder would read the live file as a
    trace and stop. Checked before anything is built."""
    if settings.trace_alongside is not None:
        check_output_dir(settings.trace_alongside, "--trace-alongside")
    if cfg.out is None:
        return
    out = Path(cfg.out).expanduser()
    if settings.trace_alongside is not None:
        try:
            dest, along = out.resolve(), Path(settings.trace_alongside).expanduser().resolve()
        except (OSError, RuntimeError):
            dest = along = None
        if dest is not None and (dest == along or along in dest.parents):
            raise ConfigError(
                f"--out {out} is inside the --trace-alongside folder {settings.trace_alongside}; the next sweep of it would read "
                "the live file as a trace: write it elsewhere"
            )
    folder = trace_folder_above(out)
    if folder is not None:
        raise ConfigError(
            f"--out {out} is inside the trace folder {folder}; the next sweep of it would read the live file as a trace: write it elsewhere"
        )


def run_live(config: TraceConfig, settings: LiveSettings | None = None, echo: Callable[[str], None] | None = None, **options: Any) -> Path:
    """Play ``config``'s method live under ``settings`` (or keyword options of
    :class:`LiveSettings`) and return the path of the written live-run Parquet file."""
    if settings is None:
        settings = LiveSettings(**options)
    elif options:
        settings = dataclasses.replace(settings, **options)
    settings = settings.checked()
    cfg = config.resolved()
    check_live_out(cfg, settings)
    if echo is None:
        echo = (lambda s: None) if cfg.quiet else (lambda s: print(s, flush=True))
    return LiveRun(cfg, settings, echo).run()
