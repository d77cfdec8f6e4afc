"""What a live invocation asks for, checked before anything runs: the protocol settings
(:class:`LiveSettings`), λ from the group's ``standard`` trace (:func:`standard_trace_lambda`)
and the runs it plans, every setting once per repeat (:func:`plan_runs`).
:mod:`tempora_trace.live_runner` plays the plan.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pyarrow.parquet as pq

from tempora_schema import GroupKey, decode_metadata
from tempora_schema.live import comparable_group
from tempora_schema.provision import LAMBDA_RULES, inflated_lambda, lambda_provision
from tempora_schema.vocabulary import BASELINE_METHOD, BUDGET_RULES, LIVE_PROTOCOLS

from .config import TraceConfig
from .errors import ConfigError
from .live_clock import MAX_SCHEDULE_MS, check_schedule, schedule_bound
from .timing import SPIN_NS, device_slug, resolve_device


@dataclass
class LiveSettings:
    """The protocol side of a live run; the data/model/method/device side is a TraceConfig."""

    protocols: Sequence[str] = ("discrete",)
    #: utilisations ρ = λ/γ (discrete); or ``gamma_ms`` directly, not both.
    rho: Sequence[float] | None = None
    gamma_ms: Sequence[float] | None = None
    queue: int = 1
    budgets_ms: Sequence[float] = ()
    budget_rule: str = "strict"
    #: λ in ms; None = mean + 6σ of the group's ``standard`` trace, found at ``standard``
    #: (a file or folder; default the folder the tracer writes this group's traces to).
    lambda_ms: float | None = None
    standard: str | None = None
    #: how λ is computed from the standard trace (``paper`` or ``robust``, as in the simulator)
    lambda_rule: str = "paper"
    repeats: int = 1
    spin_us: float = SPIN_NS / 1000
    #: a folder: also trace the method in this run, each episode's trace pass beside its live
    #: runs, into this folder (the paired comparison of docs/guide/validation.md)
    trace_alongside: str | None = None
    #: the trace taken alongside also holds the exact cut-off checkpoints of ``budgets_ms``
    #: (at its own cut-offs, under the live λ), so its amortised replay needs no nearest one
    budget_checkpoints: bool = False

    def checked(self) -> "LiveSettings":
        s = dataclasses.replace(self)
        protos = [s.protocols] if isinstance(s.protocols, str) else list(s.protocols)
        protos = [p.strip() for item in protos for p in str(item).split(",") if p.strip()]
        bad = [p for p in protos if p not in LIVE_PROTOCOLS]
        if bad or not protos:
            raise ConfigError(f"--protocol must be discrete, amortised or both (comma-separated), not '{','.join(bad) or ''}'")
        s.protocols = tuple(dict.fromkeys(protos))
        if "discrete" in s.protocols:
            if (s.rho is None) == (s.gamma_ms is None):
                raise ConfigError("the discrete protocol needs exactly one of --rho (ρ = λ/γ) and --gamma-ms")
            values = list(s.rho if s.rho is not None else s.gamma_ms)
            if not values or any(not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0) for v in values):
                name = "--rho" if s.rho is not None else "--gamma-ms"
                raise ConfigError(f"{name} values must be > 0, got {', '.join(f'{v:g}' for v in values) or 'none'}")
            if isinstance(s.queue, bool) or not isinstance(s.queue, int) or s.queue < 0:
                raise ConfigError(f"--queue must be an integer ≥ 0, got {s.queue!r}")
        if "amortised" in s.protocols:
            if not s.budgets_ms:
                raise ConfigError("the amortised protocol needs --B (overhead budgets)")
            if any(not math.isfinite(b) or b < 0 for b in s.budgets_ms):
                raise ConfigError("--B budgets must be ≥ 0 ms")
            if s.budget_rule not in BUDGET_RULES:
                raise ConfigError(f"--budget-rule must be strict or overshoot, not '{s.budget_rule}'")
        if s.lambda_ms is not None and not (math.isfinite(s.lambda_ms) and s.lambda_ms > 0):
            raise ConfigError(f"--lambda-ms must be > 0, got {s.lambda_ms:g}")
        if s.lambda_ms is not None and s.lambda_ms > MAX_SCHEDULE_MS:
            raise ConfigError(f"--lambda-ms {s.lambda_ms:g} is longer than a live run allows ({schedule_bound()})")
        if "discrete" in s.protocols and s.gamma_ms is not None:
            check_schedule(s.gamma_ms, "--gamma-ms", lambda g: f"--gamma-ms {g:g}")
        if "discrete" in s.protocols and s.rho is not None and s.lambda_ms is not None:
            check_schedule([s.lambda_ms / r for r in s.rho], "--rho", None, s.rho)
        if s.lambda_rule not in LAMBDA_RULES:
            raise ConfigError(f"--lambda-rule must be one of {', '.join(LAMBDA_RULES)}, not '{s.lambda_rule}'")
        if s.repeats < 1:
            raise ConfigError("--repeats must be ≥ 1")
        if not s.spin_us >= 0:
            raise ConfigError("--spin-us must be ≥ 0")
        if s.trace_alongside is not None and not str(s.trace_alongside).strip():
            raise ConfigError("--trace-alongside needs a folder")
        if s.budget_checkpoints and (s.trace_alongside is None or "amortised" not in s.protocols):
            raise ConfigError(
                "--budget-checkpoints adds checkpoints to the trace taken alongside: it needs --trace-alongside and --protocol amortised"
            )
        return s


def standard_trace_lambda(cfg: TraceConfig, group, source: str | None, rule: str = "paper") -> tuple[float, str, str | None]:
    """λ of the group from its ``standard`` trace under ``rule`` (the schema's definition, the
    simulator's too), the file it came from, and a one-line warning when λ is above
    1.5 × that trace's median δ (a wide spread or a few stalled batches; None otherwise).

    ``source`` is a trace file or a folder searched recursively; default the folder the
    tracer writes this group's traces to. The trace must be of the same comparable group as
    the live run (:func:`~tempora_schema.live.comparable_group`; a trace of exactly this group wins).
    """
    want = comparable_group(group)
    if source is None:
        folder = cfg.output_dir(device_slug(resolve_device(cfg.device)))
        candidates = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
        where = str(folder)
    else:
        path = Path(source).expanduser()
        candidates = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
        where = str(path)
    found = []
    for cand in candidates:
        try:
            meta = decode_metadata(pq.read_schema(cand), cand)
            key = GroupKey.from_metadata(meta)
        except Exception:  # not a trace, or one without a full group (schema v1): not a candidate
            if source is not None and not Path(source).is_dir():
                raise ConfigError(f"--standard: {cand} is not a readable Tempora trace with a complete group") from None
            continue
        if meta.get("method") == BASELINE_METHOD and comparable_group(key) == want:
            found.append((key != group, str(cand)))
    if not found:
        raise ConfigError(
            f"no λ: pass --lambda-ms, or trace the standard method of this group first (no standard trace of "
            f"{group.label()} in {where}; `tempora-trace calibrate` with the same options writes one)"
        )
    path = min(found)[1]
    table = pq.read_table(path, columns=["phase", "delta_ms"]).to_pydict()
    delta = [d for p, d in zip(table["phase"], table["delta_ms"]) if p == "adapt"]
    lam = lambda_provision(delta, rule)[0]
    inflated = inflated_lambda(lam, delta)
    warning = None
    if inflated is not None:
        warning = (
            f"warning: λ = {lam:.3f} ms is {inflated[0]:.1f}× the robust λ of {path} ({inflated[1]:.3f} ms, "
            "median + 6·1.4826·MAD): a few of its batches stalled, and every setting is lighter than its ρ or B says "
            "(--lambda-rule robust, or trace standard again on a quiet machine)"
        )
    return lam, path, warning


@dataclass
class RunPlan:
    run: int
    protocol: str
    repeat: int
    rho: float | None = None
    gamma_ms: float | None = None
    queue: int | None = None
    budget_ms: float | None = None
    budget_rule: str | None = None
    summary: dict = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        keys = ("rho", "gamma_ms", "queue") if self.protocol == "discrete" else ("budget_ms", "budget_rule")
        return {"run": self.run, "protocol": self.protocol, "repeat": self.repeat, **{k: getattr(self, k) for k in keys}, **self.summary}

    def label(self) -> str:
        if self.protocol == "discrete":
            return f"discrete ρ={self.rho * 100:.4g}% γ={self.gamma_ms:.2f} ms b={self.queue}"
        return f"amortised B={self.budget_ms:g} ms ({self.budget_rule})"


def plan_runs(settings: LiveSettings, lambda_ms: float) -> list[RunPlan]:
    """Every setting once per repeat; repeats outermost, so two runs of one setting are apart in time.
    Refuses a schedule beyond :data:`MAX_SCHEDULE_MS` (λ here may come from a standard trace)."""
    if not lambda_ms <= MAX_SCHEDULE_MS:
        raise ConfigError(f"λ = {lambda_ms:.3g} ms is longer than a live run allows ({schedule_bound()})")
    if "discrete" in settings.protocols and settings.rho is not None:
        check_schedule([lambda_ms / float(r) for r in settings.rho], "--rho", None, list(settings.rho))
    plans: list[RunPlan] = []
    for rep in range(1, settings.repeats + 1):
        if "discrete" in settings.protocols:
            if settings.rho is not None:
                pairs = [(float(r), lambda_ms / float(r)) for r in settings.rho]
            else:
                pairs = [(lambda_ms / float(g), float(g)) for g in settings.gamma_ms]  # type: ignore[union-attr]
            for rho, gamma in pairs:
                plans.append(RunPlan(len(plans), "discrete", rep, rho=rho, gamma_ms=gamma, queue=int(settings.queue)))
        if "amortised" in settings.protocols:
            for b in settings.budgets_ms:
                plans.append(RunPlan(len(plans), "amortised", rep, budget_ms=float(b), budget_rule=settings.budget_rule))
    return plans
