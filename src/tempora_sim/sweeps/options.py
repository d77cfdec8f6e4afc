"""Sweep options, declared once: the Python API, ``tempora-sim sweep`` and ``report`` share them.

:class:`SweepOptions` is the single declaration (name, default, meaning, command-line flag);
``tempora_sim.sweep(source, **options)`` builds one, and :func:`click_options` turns the same
fields into the command-line options of every subcommand that sweeps, so a new option added
here appears everywhere with the same name, default and help.

Values stay as the user typed them (``'1,0.7'``, ``'1s'``, ``'@grid.txt'``, ``'0.05:1:0.001'``)
until :meth:`SweepOptions.resolve` checks every one of them, before any trace is read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tempora_schema.provision import LAMBDA_RULES
from tempora_schema.vocabulary import BUDGET_RULES
from tempora_sim.engine import grids
from tempora_sim.engine.replay_options import ReplayOptions
from tempora_sim.errors import GridError
from tempora_toolkit.command_line import INT32_MAX

SKIPPED_MODES = ("null", "random")
SYNC_MODES = ("buffered", "strict")
ENGINES = ("numba", "python")


def _opt(
    default: Any,
    help: str,
    flag: str | None = None,
    choices: Sequence[str] | None = None,
    default_text: str | None = None,
    int_range: tuple[int, int] | None = None,
) -> Any:
    """A field with its command-line declaration (``flag=None``: Python API only); ``choices``
    and ``int_range`` become click's Choice / IntRange, so --help shows them."""
    return field(
        default=default, metadata={"flag": flag, "help": help, "choices": choices, "default_text": default_text, "int_range": int_range}
    )


def _fmt(values: Sequence[float], unit: str = "") -> str:
    return ",".join(f"{v:g}{unit}" for v in values)


@dataclass(frozen=True)
class SweepOptions:
    """What to replay and how. Grid fields accept a comma-separated string (with units), a
    sequence of numbers, ``'@file'`` or ``'start:stop:step'``; ``None`` means the paper's grid."""

    protocols: str | Sequence[str] = _opt(
        "all",
        "Protocols: all (offline, discrete, continuous, amortised), or a comma-separated list of those and "
        "the combined discrete-continuous (ρ × T) and discrete-amortised (ρ × B).",
        "--protocol",
    )
    rho: str | Sequence[float] | None = _opt(
        None,
        "Utilisations ρ = λ/γ as fractions or %: a comma list (1,0.7,50%), @FILE of values, or a range START:STOP:STEP (0.05:1:0.001).",
        "--rho",
        default_text=_fmt(grids.DEFAULT_RHO),
    )
    T_ms: str | Sequence[float] | None = _opt(
        None,
        "HCI thresholds T: ms, or with ms/s suffixes; comma list, @FILE or START:STOP:STEP.",
        "--T",
        default_text=_fmt(grids.DEFAULT_T_MS),
    )
    B_ms: str | Sequence[float] | None = _opt(
        None,
        "Overhead budgets B: ms, or with ms/s suffixes; comma list, @FILE or START:STOP:STEP.",
        "--B",
        default_text=",".join(f"{b / 1000:g}s" for b in grids.DEFAULT_B_MS),
    )
    lambda_ms: str | float | None = _opt(
        None,
        "Use this λ for every group instead of mean + 6σ of its standard trace (ms, or with ms/s).",
        "--lambda-ms",
        default_text="from each group's standard trace",
    )
    lambda_rule: str = _opt(
        "paper",
        "λ from the standard trace's δ: paper = mean + 6σ, robust = median + 6·1.4826·MAD (docs/reference/trace-schema.md); recorded in every row.",
        "--lambda-rule",
        LAMBDA_RULES,
    )
    queue: int = _opt(1, "Discrete queue capacity b (0 = drop arrivals while busy).", "--queue", int_range=(0, INT32_MAX))
    sync: str = _opt("buffered", "strict: Alfarra et al.'s +2 synchronisation (pickup only at arrivals, no drain).", "--sync", SYNC_MODES)
    skipped: str = _opt("null", "Score of a skipped batch: 0 (null prediction) or 1/C (random prediction).", "--skipped", SKIPPED_MODES)
    fallback: bool = _opt(False, "Dual-model fallback: skipped batches get the adapting model's forward-only prediction.", "--fallback")
    budget_rule: str = _opt(
        "strict", "strict: m = max{j: Σc ≤ B} (paper); overshoot: adapt while spent < B (reference code).", "--budget-rule", BUDGET_RULES
    )
    arrivals: str = _opt(
        "periodic",
        "Arrival process of the discrete protocols: periodic, poisson[:SEED], burst:ON,OFF[:SEED] "
        "(mean on/off lengths in units of γ) or file:PATH (recorded timestamps); mean gap γ = λ/ρ.",
        "--arrivals",
    )
    arrival_seeds: int = _opt(
        1, "Replay this many arrival seeds (SEED, SEED+1, …), pooled like episodes.", "--arrival-seeds", int_range=(1, 10_000)
    )
    arrivals_absolute: bool = _opt(
        False,
        "With --arrivals file:PATH, use the recorded times as they are (no rescaling; ρ is then the recording's own load).",
        "--arrivals-absolute",
    )
    no_idle_effect: bool = _opt(
        False,
        "Replay every event at its traced time even where the trace measured that events after an idle gap run "
        "slower or faster (the idle effect, docs/design/statistics.md).",
        "--no-idle-effect",
    )
    engine: str = _opt("numba", "numba kernels, or the plain-Python oracle (slow; for tests).", None, ENGINES)

    @classmethod
    def build(cls, options: "SweepOptions | None" = None, **changes: Any) -> "SweepOptions":
        """``options`` (or the defaults) with ``changes``; unknown names are a one-line error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise GridError(f"unknown sweep option(s) {', '.join(unknown)}; options: {', '.join(sorted(names))}")
        base = options if options is not None else cls()
        return dataclasses.replace(base, **changes) if changes else base

    def given(self) -> dict[str, Any]:
        """The options that differ from the defaults (what the user asked for)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}

    def resolve(self) -> "ResolvedOptions":
        """Every value parsed and checked (GridError otherwise): nothing is read before this."""
        queue = self.queue
        if isinstance(queue, bool) or not isinstance(queue, int) and not hasattr(queue, "__index__"):
            raise GridError(f"--queue: capacity must be an integer >= 0 (got {queue!r})")
        queue = int(queue)
        if not 0 <= queue <= INT32_MAX:
            raise GridError(f"--queue: capacity must be an integer in 0..{INT32_MAX} (got {queue})")
        for name, value, allowed in (
            ("budget-rule", self.budget_rule, BUDGET_RULES),
            ("lambda-rule", self.lambda_rule, LAMBDA_RULES),
            ("skipped", self.skipped, SKIPPED_MODES),
            ("sync", self.sync, SYNC_MODES),
            ("engine", self.engine, ENGINES),
        ):
            if value not in allowed:
                raise GridError(f"--{name}: '{value}' is not one of {', '.join(allowed)}")
        if self.fallback and self.skipped == "random":
            raise GridError("--fallback and --skipped random both score skipped batches; choose one")
        lam = None
        if self.lambda_ms is not None:
            lam = grids.parse_time_ms(self.lambda_ms, "lambda-ms")
            if lam <= 0:
                raise GridError(f"--lambda-ms: λ must be > 0 ms (got {lam:g})")
        # lazy: options load with `--help`; the parsers bring the arrivals, scenarios and registry
        from tempora_sim.engine.arrivals import parse_arrivals
        from tempora_sim.protocols import parse_protocols
        from tempora_sim.sweeps.scenarios import check_scenario_options

        protocols = parse_protocols(self.protocols)
        spec = parse_arrivals(self.arrivals)
        n_seeds = self.arrival_seeds
        if isinstance(n_seeds, bool) or not hasattr(n_seeds, "__index__") or not 1 <= int(n_seeds) <= 10_000:
            raise GridError(f"--arrival-seeds: a count from 1 to 10000 (got {n_seeds!r})")
        if spec.seed + int(n_seeds) - 1 >= 2**63:
            raise GridError(
                f"--arrival-seeds: {int(n_seeds)} seeds from {spec.seed} go beyond 2^63-1 (seeds are SEED, SEED+1, …); choose a smaller seed"
            )
        seeds = tuple(spec.seed + k for k in range(int(n_seeds)))
        check_scenario_options(protocols, spec, seeds, bool(self.arrivals_absolute), self.rho is not None)
        return ResolvedOptions(
            protocols=protocols,
            rho=grids.RHO.parse(self.rho) if self.rho is not None else grids.RHO.default,
            T_ms=grids.T.parse(self.T_ms) if self.T_ms is not None else grids.T.default,
            B_ms=grids.B.parse(self.B_ms) if self.B_ms is not None else grids.B.default,
            explicit_T=self.T_ms is not None,
            lambda_ms=lam,
            lambda_rule=self.lambda_rule,
            replay=ReplayOptions(queue, self.sync, self.skipped, bool(self.fallback), self.budget_rule),
            engine=self.engine,
            arrivals=spec,
            arrival_seeds=seeds,
            arrivals_absolute=bool(self.arrivals_absolute),
            no_idle_effect=bool(self.no_idle_effect),
        )


@dataclass(frozen=True)
class ResolvedOptions:
    """:class:`SweepOptions` after parsing: grids as tuples of floats (ρ fractions, T/B in ms)."""

    protocols: tuple[str, ...]
    rho: tuple[float, ...]
    T_ms: tuple[float, ...]
    B_ms: tuple[float, ...]
    explicit_T: bool
    lambda_ms: float | None
    lambda_rule: str
    #: what every kernel and oracle call reads (queue, sync, skipped, fallback, budget rule)
    replay: ReplayOptions
    engine: str
    arrivals: Any = None  # tempora_sim.engine.arrivals.ArrivalSpec
    arrival_seeds: tuple[int, ...] = (0,)
    arrivals_absolute: bool = False
    no_idle_effect: bool = False

    def grid(self, grid: grids.Grid) -> tuple[float, ...]:
        """The values of one grid parameter: the sweep option of that name (``rho``, ``T_ms``,
        ``B_ms``), or the grid's default for a protocol whose grid has no option of its own."""
        return getattr(self, grid.param, grid.default)


def click_options(fn: Callable) -> Callable:
    """Add every :class:`SweepOptions` field that has a flag as a click option of ``fn``.

    Click defaults are ``None`` (or ``False`` for flags) so a command can tell what the user
    typed (``report`` refuses sweep options when it reads results); the help shows the real
    default. The command receives the values under the field names."""
    import click  # lazy: the library API (`tempora_sim.sweep(...)`) does not need click

    for f in reversed(dataclasses.fields(SweepOptions)):
        meta = f.metadata
        if not meta.get("flag"):
            continue
        shown = meta["default_text"] if meta["default_text"] is not None else f.default
        help_text = f"{meta['help']}  [default: {shown}]"
        if f.type == "bool" or isinstance(f.default, bool):
            option = click.option(meta["flag"], f.name, is_flag=True, default=False, help=meta["help"])
        elif meta["choices"]:
            option = click.option(meta["flag"], f.name, type=click.Choice(list(meta["choices"])), default=None, help=help_text)
        elif meta["int_range"]:
            option = click.option(meta["flag"], f.name, type=click.IntRange(*meta["int_range"]), default=None, help=help_text)
        else:
            option = click.option(meta["flag"], f.name, default=None, help=help_text)
        fn = option(fn)
    return fn


def from_click(values: dict[str, Any]) -> SweepOptions:
    """:class:`SweepOptions` from a command's keyword arguments (``None``/``False`` = not given);
    removes the sweep options from ``values``."""
    changes = {}
    for f in dataclasses.fields(SweepOptions):
        if f.metadata.get("flag") and f.name in values:
            value = values.pop(f.name)
            if value is not None and value is not False:
                changes[f.name] = value
    return SweepOptions.build(**changes)
