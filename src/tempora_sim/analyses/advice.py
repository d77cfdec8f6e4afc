"""Which method to deploy at *your* constraint, and how sure that is (``tempora-sim advise``).

For each comparison group (seeds pooled, like episodes) the traces are replayed at exactly
the given constraint (``--rho``, ``--gamma-ms``, ``--T`` or ``--B``; one at a time: the
protocols do not combine) and the answer is a few lines: the method with the highest pooled
utility, its bootstrap interval, its lead over the runner-up with the paired interval and
whether that lead is certain (docs/design/statistics.md), the terms that decide it (α and ā_served,
ā and κ̄, or β and ā_frozen), and how far the constraint can move before another method wins:
the kernels replay a fine grid on both sides of the constraint and the switch points are
refined on a second, finer grid between the last grid value where the recommendation holds
and the first where it does not.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import polars as pl

from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.engine import grids
from tempora_sim.errors import SimError
from tempora_sim.sweeps import variability
from tempora_sim.sweeps.replay import run_sweep as _run_sweep
from tempora_sim.sweeps.traces import TraceSet, group_lambdas, load_traces
from tempora_sim.uncertainty import timing_replicates
from tempora_sim.uncertainty.bootstrap import BootstrapOptions
from tempora_sim.uncertainty.timing_replicates import INTERVAL_MEASURES, replicates_of

#: Fine-grid resolution of the boundary search (values per side), then the refinement.
GRID_POINTS = 160
REFINE_POINTS = 48
#: Where the search stops: ρ down to 1 %, γ and T up to ×64 the constraint, B up to the
#: largest overhead any trace can spend (beyond it every method adapts on every batch).
RHO_MIN = 0.01
SPAN = 64.0


class AdviseError(SimError, ValueError):
    """A bad constraint (message is the whole story, shown as one line)."""


@dataclass(frozen=True)
class Constraint:
    protocol: str  # discrete | continuous | amortised | discrete-continuous | discrete-amortised
    kind: str  # rho | gamma_ms | T_ms | B_ms
    value: float
    #: combined protocols: the T or B that holds together with ρ (docs/design/design.md §9)
    second: "Constraint | None" = None

    @property
    def axes(self) -> list["Constraint"]:
        return [self] + ([self.second] if self.second is not None else [])

    def full_label(self) -> str:
        return " with ".join(a.label() for a in self.axes)

    def label(self, v: float | None = None) -> str:
        v = self.value if v is None else v
        if self.kind == "rho":
            return f"ρ = {v * 100:.4g}%"
        if self.kind == "gamma_ms":
            return f"γ = {v:.4g} ms"
        if self.kind == "T_ms":
            return f"T = {v / 1000:.4g} s" if v >= 1000 else f"T = {v:.4g} ms"
        return f"B = {v / 1000:.4g} s" if v >= 1000 else f"B = {v:.4g} ms"


def parse_constraint(rho, gamma_ms, T, B) -> Constraint:
    """Exactly one constraint, parsed with the sweep's units and checked for range; the
    protocol is the one whose grid parameters are the constraint's (γ moves ρ's)."""
    given = [(k, v) for k, v in (("rho", rho), ("gamma-ms", gamma_ms), ("T", T), ("B", B)) if v is not None]
    names = [k for k, _ in given]
    if names in (["rho", "T"], ["rho", "B"]):
        # a combined protocol: deadline + patience (ρ × T) or deadline + budget (ρ × B)
        first = parse_constraint(rho, None, None, None)
        second = parse_constraint(None, None, T, None) if T is not None else parse_constraint(None, None, None, B)
        return Constraint(P.with_grids((first.kind, second.kind)), first.kind, first.value, second)
    if len(given) != 1:
        listed = ", ".join(f"--{k}" for k in names) or "none"
        raise AdviseError(
            f"give one constraint (--rho, --gamma-ms, --T or --B) or a combined one (--rho with --T, or --rho with --B); got {listed}"
        )
    name, raw = given[0]
    if name == "rho":
        v = grids.parse_ratio(raw, "rho")
        if not 0 < v <= 1:
            raise AdviseError(f"--rho: utilisation must be in (0, 100%] (got {raw}); ρ = λ/γ")
        return Constraint(P.with_grids(("rho",)), "rho", v)
    v = grids.parse_time_ms(raw, name)
    if name == "gamma-ms":
        if v <= 0:
            raise AdviseError(f"--gamma-ms: inter-arrival time must be > 0 ms (got {raw})")
        return Constraint(P.with_grids(("rho",)), "gamma_ms", v)
    if name == "T":
        if v <= 0:
            raise AdviseError(f"--T: threshold must be > 0 ms (got {raw})")
        return Constraint(P.with_grids(("T_ms",)), "T_ms", v)
    if v < 0:
        raise AdviseError(f"--B: budget must be >= 0 ms (got {raw})")
    return Constraint(P.with_grids(("B_ms",)), "B_ms", v)


# ----------------------------------------------------------------------------- replay
def _sweep(traceset, c: Constraint, values, sweep_opts: dict, axis: int = 0, keep: list | None = None):
    """Per-seed utility rows of the group with ``axis`` of the constraint at ``values`` (the
    other axis, if any, held), a column ``_x`` giving the moved value (kernels). ``keep``
    receives the :class:`~tempora_sim.sweeps.replay.SweepResult` (timing replicates replay it)."""

    def run_sweep(*args, **kwargs):
        result = _run_sweep(*args, **kwargs)
        if keep is not None:
            keep.append(result)
        return result

    values = [float(v) for v in values]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if c.second is not None:
            fixed = c.second.kind
            if axis == 0:
                frame = run_sweep(traceset, protocols=c.protocol, **{c.kind: values, fixed: [c.second.value]}, **sweep_opts).frame
                return frame.with_columns(pl.col("value").alias("_x"))
            frame = run_sweep(traceset, protocols=c.protocol, **{c.kind: [c.value], fixed: values}, **sweep_opts).frame
            return frame.with_columns(pl.col("value2").alias("_x"))
        if c.kind == "gamma_ms":
            # γ itself: λ := γ0 and ρ = γ0/γ make every inter-arrival time λ/ρ = γ
            g0 = c.value
            frame = run_sweep(traceset, protocols=c.protocol, rho=[g0 / v for v in values], lambda_ms=g0, **sweep_opts).frame
            return frame.with_columns((g0 / pl.col("value")).alias("_x"))
        frame = run_sweep(traceset, protocols=c.protocol, **{c.kind: values}, **sweep_opts).frame
        return frame.with_columns(pl.col("value").alias("_x"))


def _pooled_utilities(frame, methods: list[str]):
    """Moved values (sorted) and the utility matrix [values, methods] of the seed-pooled rows."""
    p = an.pool_seeds(frame.filter(pl.col("episode") == an.POOLED))
    values = sorted(set(p.get_column("_x").to_list()))
    vi = {v: i for i, v in enumerate(values)}
    mi = {m: j for j, m in enumerate(methods)}
    U = np.full((len(values), len(methods)), -np.inf)
    for v, m, u in p.select("_x", "method", "utility").iter_rows():
        if u is not None and m in mi:
            U[vi[v], mi[m]] = u
    return np.asarray(values), U


def _holds(U: np.ndarray, j: int, tol: float = 1e-12) -> np.ndarray:
    """Per grid value: does method j still have the highest utility (ties count as holding)?"""
    return U[:, j] >= U.max(axis=1) - tol


def _boundary(traceset, c: Constraint, methods, j, lo_v, hi_v, side, sweep_opts, axis: int = 0):
    """First value of ``axis`` at which method j stops winning, searching from the constraint
    to ``side`` ('down' or 'up') within [lo_v, hi_v]; None if it wins throughout."""
    v0 = c.axes[axis].value
    far = lo_v if side == "down" else hi_v
    if (side == "down" and far >= v0) or (side == "up" and far <= v0):
        return None
    grid = _span(v0, far, GRID_POINTS)
    vals, U = _pooled_utilities(_sweep(traceset, c, grid, sweep_opts, axis), methods)
    order = np.argsort(np.abs(np.log(np.maximum(vals, 1e-300)) - math.log(max(v0, 1e-300)))) if v0 > 0 else np.argsort(np.abs(vals - v0))
    vals, U = vals[order], U[order]
    held = _holds(U, j)
    lost = np.flatnonzero(~held)
    if not lost.size:
        return None
    k = lost[0]
    last_ok = vals[k - 1] if k > 0 else v0
    fine = _span(last_ok, vals[k], REFINE_POINTS)
    fv, FU = _pooled_utilities(_sweep(traceset, c, fine, sweep_opts, axis), methods)
    fo = np.argsort(np.abs(fv - last_ok))
    fv, FU = fv[fo], FU[fo]
    fl = np.flatnonzero(~_holds(FU, j))
    k2 = fl[0] if fl.size else None
    at = float(fv[k2]) if k2 is not None else float(vals[k])
    row = FU[k2] if k2 is not None else U[k]
    return {"value": at, "winner": methods[int(np.argmax(row))]}


def _span(a: float, b: float, n: int) -> np.ndarray:
    """n values from a (excluded) to b (included), geometric when both are > 0."""
    if a > 0 and b > 0:
        return np.geomspace(a, b, n + 1)[1:]
    return np.linspace(a, b, n + 1)[1:]


# ----------------------------------------------------------------------------- advice
def advise(source, constraint: Constraint, bootstrap=None, sweep_opts: dict | None = None) -> list[dict]:
    """The recommendation per comparison group (a list of plain dicts, JSON-ready)."""
    bootstrap = bootstrap or BootstrapOptions()
    sweep_opts = sweep_opts or {}
    traceset = source if isinstance(source, TraceSet) else load_traces(source)
    lambdas = group_lambdas(traceset)
    groups: dict[tuple, list] = {}
    names = [k for k in an.GROUP_COLUMNS if k != "group"] + ["group"]
    for t in traceset.traces:
        # the comparison group: the setting without its seed (seeds pool like episodes)
        key = tuple(t.meta[k] for k in names[:-1]) + (t.group.label(seed=False),)
        groups.setdefault(key, []).append(t)
    out = []
    for key, members in groups.items():
        ts = TraceSet(members)
        lams = sorted({lambdas[t.group] for t in members})
        c = constraint
        for a in c.axes:
            if a.kind == "T_ms" and a.value <= max(lams):
                raise AdviseError(
                    f"--T {a.value:g} ms must exceed λ = {max(lams):.2f} ms of group {key[-1]} (continuous utility needs T > λ)"
                )
        kept: list = []
        frame = _sweep(ts, c, [c.value], sweep_opts, keep=kept)

        # one scenario: label it as a single-parameter one so the interval machinery reads it
        def relabel(f, c=c):
            return f.with_columns(
                pl.lit(c.value).alias("value"),
                pl.lit(P.with_grids((P.get(c.protocol).grids[0].param,)) if c.second else c.protocol).alias("protocol"),
            ).drop([x for x in ("param2", "value2") if x in f.columns])

        frame = relabel(frame)
        # the traces' measured timing variability, replayed and combined with the resamples
        timing = replicates_of(kept[0], bootstrap.timing_replicates, bootstrap.seed, measures=INTERVAL_MEASURES)
        timing = timing.map(relabel) if timing is not None else None
        intervals = an.utility_intervals(frame, None, bootstrap, timing=timing)
        pw = an.pooled_winners(frame, intervals).row(0, named=True)
        pooled = an.pool_seeds(frame.filter(pl.col("episode") == an.POOLED))
        pooled = an.attach_intervals(pooled, intervals).sort("utility", descending=True, nulls_last=True)
        methods = pooled.get_column("method").to_list()
        rows = {r["method"]: r for r in pooled.iter_rows(named=True)}
        rec = pooled.row(0, named=True)
        j = methods.index(rec["method"])
        moves = []
        for axis, a in enumerate(c.axes):
            lo_v, hi_v = _search_range(a, members, lams)
            down = _boundary(ts, c, methods, j, lo_v, hi_v, "down", sweep_opts, axis)
            up = _boundary(ts, c, methods, j, lo_v, hi_v, "up", sweep_opts, axis)
            moves.append(
                {
                    "moves": a.kind,
                    "holds_from": None if down is None else down["value"],
                    "below_winner": None if down is None else down["winner"],
                    "holds_to": None if up is None else up["value"],
                    "above_winner": None if up is None else up["winner"],
                    "search_range": [lo_v, hi_v],
                }
            )
        seeds = sorted({int(t.meta["seed"]) for t in members})
        episodes = sorted({e for t in members for e in t.episodes})
        runner = rows.get(pw["runner_up"]) if pw["runner_up"] else (pooled.row(1, named=True) if len(methods) > 1 else None)
        out.append(
            {
                "group": dict(zip(names, key)),
                "seeds": seeds,
                "episodes": len(episodes),
                "lambda_ms": lams,
                "constraint": {"protocol": c.protocol, **{a.kind: a.value for a in c.axes}},
                "recommended": rec["method"],
                # the method and sparse-adaptation policy it stands for (docs/design/design.md §11)
                **an.policy_advice(frame, intervals, rec["method"]),
                "tied_with": [m for m in pw["winners"] if m != rec["method"]],
                "utility": rec["utility"],
                "utility_ci": [rec["lo"], rec["hi"]],
                "runner_up": None if runner is None else runner["method"],
                "runner_up_utility": None if runner is None else runner["utility"],
                "lead": None if runner is None else rec["utility"] - runner["utility"],
                "lead_ci": [pw["lead_lo"], pw["lead_hi"]],
                "certain": pw["certain"],
                "ci_level": bootstrap.level,
                "timing_uncertainty": variability.MEASURED
                if timing is not None and timing.count and all(v == variability.MEASURED for v in timing.status.values())
                else variability.UNKNOWN,
                "timing": timing_replicates.describe(timing, bootstrap.timing_replicates),
                "mechanism": {m: _mechanism(c, rows[m]) for m in [rec["method"]] + ([runner["method"]] if runner else [])},
                # the first axis's switch points at the top level; every axis in `moves`
                **{k: v for k, v in moves[0].items() if k != "moves"},
                "moves": moves,
            }
        )
    return out


def _search_range(c: Constraint, members, lams) -> tuple[float, float]:
    if c.kind == "rho":
        return RHO_MIN, 1.0
    if c.kind == "gamma_ms":
        return c.value / SPAN, c.value * SPAN
    if c.kind == "T_ms":
        return max(lams) * (1 + 1e-9), c.value * SPAN
    lam = max(lams)
    spend = max((float(np.clip(t.adapt["delta_ms"].to_numpy() - lam, 0, None).sum()) for t in members), default=0.0)
    return 0.0, max(spend * 1.01, c.value * 1.01, 1.0)


def _mechanism(c: Constraint, r: dict) -> dict:
    """The terms that decide the protocol's utility, as the answer states them."""
    return {k: r.get(k) for k in P.get(c.protocol).advise_terms}


# ----------------------------------------------------------------------------- text
def _pc(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:.2f}%"


def _pp(x) -> str:
    return "–" if x is None else f"{x * 100:+.2f}"


def _why(c: Constraint, m: str, mech: dict) -> str:
    return P.get(c.protocol).advise_why(m, mech, _pc)


def text_lines(advice: list[dict], c: Constraint) -> list[str]:
    lines = []
    for a in advice:
        g = a["group"]
        seeds = f"seed {a['seeds'][0]}" if len(a["seeds"]) == 1 else f"seeds {', '.join(map(str, a['seeds']))} pooled"
        lam = ", ".join(f"{x:.2f}" for x in a["lambda_ms"])
        lines.append(
            f"{g['dataset']} · {g['model']} · {g['device']} · bs {g['batch_size']} · {g['stream']} · {seeds} · {a['episodes']} episodes · λ = {lam} ms"
        )
        level = f"{a['ci_level'] * 100:g}%"
        tie = f" (tied with {', '.join(a['tied_with'])})" if a["tied_with"] else ""
        what = a["recommended"] if a.get("policy") is None else f"{a['method']}, {a['policy_words']} ({a['recommended']})"
        lines.append(
            f"  at {c.full_label()}: use {what}{tie}: U = {_pc(a['utility'])} "
            f"[{_pc(a['utility_ci'][0])}, {_pc(a['utility_ci'][1])}] ({level} CI, episodes resampled)"
        )
        lines.append(f"  {a['timing']}")
        vs = a.get("vs_every_batch")
        if vs is not None and a.get("policy") is not None:
            verdict = {True: "certain", False: "uncertain", None: "not assessed"}[vs["certain"]]
            ci = "" if vs["gain_ci"][0] is None else f" [{_pp(vs['gain_ci'][0])}, {_pp(vs['gain_ci'][1])}] (paired)"
            lines.append(
                f"  over {a['method']} adapting on every batch (U = {_pc(vs['every_batch_utility'])}): {_pp(vs['gain'])} pp{ci} → {verdict}"
            )
        elif vs is not None:
            lines.append(f"  {a['method']} adapting on every batch beats its {vs['variants'] - 1} traced sparse-adaptation policies here")
        if a["runner_up"] is not None:
            verdict = {True: "certain", False: "uncertain: could be a coin toss", None: "not assessed"}[a["certain"]]
            lines.append(
                f"  lead over {a['runner_up']}: {_pp(a['lead'])} pp [{_pp(a['lead_ci'][0])}, {_pp(a['lead_ci'][1])}] (paired) → {verdict}"
            )
        lines.append("  why: " + "; ".join(_why(c, m, mech) for m, mech in a["mechanism"].items()))
        for ax, mv in zip(c.axes, a["moves"]):
            lo, hi = mv["search_range"]
            below = (
                f"{mv['below_winner']} wins from {ax.label(mv['holds_from'])}"
                if mv["holds_from"] is not None
                else f"no change down to {ax.label(lo)}"
            )
            above = (
                f"{mv['above_winner']} wins from {ax.label(mv['holds_to'])}"
                if mv["holds_to"] is not None
                else f"no change up to {ax.label(hi)}"
            )
            what = (
                "the constraint moves"
                if c.second is None
                else f"{ax.label().split(' = ')[0]} moves ({' and '.join(o.label() for o in c.axes if o is not ax)} held)"
            )
            lines.append(f"  stays best while {what}: down: {below}; up: {above}")
    return lines
