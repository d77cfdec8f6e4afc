"""How far a live run may stand from the replay of its trace before ``tempora-sim validate``
fails it (``docs/guide/validation.md``).

Apart from :mod:`tempora_sim.validation.live_runs` so that the command line declares its options'
defaults without loading the replay: ``tempora-sim --help`` imports this module, the
validation only when ``validate`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The targets of the validation (``docs/guide/validation.md``), as defaults of the CLI options.
DEFAULT_ABS_TOL_PP = 2.0
DEFAULT_SPREAD_SLACK_PP = 0.5
DEFAULT_AMORTISED_TOL_PP = 0.5
DEFAULT_MIN_AGREEMENT_PCT = 99.5
DEFAULT_TIE_US = 1.0
#: How far the traced clock may stand from the live one (mean δ of the same batches, the
#: trace's idle effect applied), percent, unless the trace's own pass-to-pass spread is wider.
DEFAULT_CLOCK_TOL_PCT = 5.0


@dataclass
class Tolerances:
    abs_pp: float = DEFAULT_ABS_TOL_PP
    spread_slack_pp: float = DEFAULT_SPREAD_SLACK_PP
    amortised_pp: float = DEFAULT_AMORTISED_TOL_PP
    min_agreement_pct: float = DEFAULT_MIN_AGREEMENT_PCT
    tie_us: float = DEFAULT_TIE_US
    clock_pct: float = DEFAULT_CLOCK_TOL_PCT
