"""Analyses over a sweep's ``utility.parquet``: who wins where, and why the others lose.

Every public function takes the sweep's utility table (docs/design/design.md §6 columns) and returns one
polars table. Each module answers one of the practitioner's questions behind the paper's findings:

* :mod:`~tempora_sim.analyses.cells_and_orders`: the table's check, its cells and scenarios, and the
  reading orders of episodes, scenarios and methods;
* :mod:`~tempora_sim.analyses.wins`: which method wins each (episode, scenario) cell and each pooled
  scenario, and how certain and how stable over seeds that is (Table 15 / Figure 1);
* :mod:`~tempora_sim.analyses.rankings`: how far the offline ranking predicts the temporal one (Table 25);
* :mod:`~tempora_sim.analyses.losses`: what losing costs (Table 23) and how often a method does worse
  than not adapting at all (Table 24);
* :mod:`~tempora_sim.analyses.decompositions`: why it loses under the strictest pressure of each
  protocol (Tables 3–5, 14, insolvency);
* :mod:`~tempora_sim.analyses.budget`: what each extra second of adaptation budget buys (the amortised
  Pareto frontier);
* :mod:`~tempora_sim.analyses.latency`: where the time goes per batch (Table 2), from the traces' rows;
* :mod:`~tempora_sim.analyses.intervals`: how uncertain each utility is (bootstrap intervals);
* :mod:`~tempora_sim.analyses.policies`: what adapting on fewer batches buys (sparse-adaptation policies);
* :mod:`~tempora_sim.analyses.advice`: one constraint in, one recommendation out (``tempora-sim advise``).

The package re-exports every module's public names but the advice's (``from tempora_sim import
analyses as an; an.winners(table)``), and with them the sweep's seed and group conventions
(:mod:`tempora_sim.sweeps.utility_table`) the callers read beside them.

Conventions, stated once and used everywhere:

* A *scenario* is (protocol, parameter value); ``offline`` is one scenario. A *cell* is one
  (group, episode, scenario); pooled ``episode == "__all__"`` rows are not cells, they feed
  the aggregate decompositions only.
* *Winner* of a cell: every method whose utility is within ``tol`` (default 1e-12, absolute)
  of the cell's best utility. Tied methods share the cell and each is credited one win.
* Losses and deficits (Table 23) and below-standard counts (Table 24) are over *temporal*
  cells (offline excluded), as in the paper; a tied winner has not lost. The mean deficit is
  the mean of ``best − utility`` over the cells a method lost (the paper's "upon losing").
* Spearman r_s: ranks with ties averaged, then the Pearson correlation of the two rank
  vectors. If either ranking is constant (or fewer than 2 methods), r_s is undefined → null.
  Across episodes we report the mean and the *sample* standard deviation (ddof = 1), which
  reproduces the paper's Table 25 (e.g. its ρ = 100 % column: std 0.51 from the listed cells).
* "Best competitor" of a method = the best *other* method in the same cell. Insolvent means
  the method would need more than 100 % served accuracy (discrete: best competitor / α) or
  accuracy (continuous: best competitor / κ̄, zero alignment) to match it.
"""

from __future__ import annotations

from tempora_schema.vocabulary import BASELINE_METHOD as BASELINE
from tempora_sim.analyses.budget import budget_protocol, budget_spent, pareto
from tempora_sim.analyses.cells_and_orders import (
    CANONICAL_EPISODES,
    CATEGORIES,
    DEFAULT_TOL,
    REQUIRED_COLUMNS,
    AnalysisError,
    cell_keys,
    cells,
    check_utility_table,
    episode_order,
    format_value,
    method_order,
    pressure_order,
    representative_episodes,
    with_scenario,
)
from tempora_sim.analyses.decompositions import (
    decomposition,
    insolvency,
    strict_terms,
    strictest_value,
)
from tempora_sim.analyses.intervals import attach_intervals, utility_intervals
from tempora_sim.analyses.latency import align_group_dtypes, latency_breakdown, trace_rows
from tempora_sim.analyses.losses import below_standard, deficits
from tempora_sim.analyses.policies import EVERY_BATCH, adaptation_rates, policy_advice, policy_gains, policy_points
from tempora_sim.analyses.rankings import offline_table, rank_correlation, rank_correlation_cells, summarise_rank_correlation
from tempora_sim.analyses.wins import pooled_winners, seed_stability, sweep_table, win_counts, winners, with_certainty
from tempora_sim.sweeps.utility_table import GROUP_COLUMNS, POOLED, SEED, SEEDS, group_columns, pool_seeds

__all__ = [
    "BASELINE",
    "CANONICAL_EPISODES",
    "CATEGORIES",
    "DEFAULT_TOL",
    "EVERY_BATCH",
    "GROUP_COLUMNS",
    "POOLED",
    "REQUIRED_COLUMNS",
    "SEED",
    "SEEDS",
    "adaptation_rates",
    "align_group_dtypes",
    "attach_intervals",
    "below_standard",
    "budget_protocol",
    "budget_spent",
    "cell_keys",
    "cells",
    "check_utility_table",
    "decomposition",
    "deficits",
    "episode_order",
    "format_value",
    "group_columns",
    "insolvency",
    "latency_breakdown",
    "method_order",
    "offline_table",
    "pareto",
    "policy_advice",
    "policy_gains",
    "policy_points",
    "pool_seeds",
    "pooled_winners",
    "pressure_order",
    "rank_correlation",
    "rank_correlation_cells",
    "representative_episodes",
    "seed_stability",
    "strict_terms",
    "strictest_value",
    "summarise_rank_correlation",
    "sweep_table",
    "trace_rows",
    "utility_intervals",
    "win_counts",
    "winners",
    "with_certainty",
    "with_scenario",
    "AnalysisError",
]
