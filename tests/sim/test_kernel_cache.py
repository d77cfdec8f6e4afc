"""`make install` fills Numba's cache with the replay kernels (tempora_sim.sweeps.kernel_cache):
the kernels it compiles must be the ones real answers call, with the argument types they pass,
or a fresh install would still compile them in its first sweeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter (no sweep has run there): compile every kernel, note each dispatcher's
# signatures, then run the answers (every protocol on periodic and Poisson arrivals, the idle
# effect, validate with its timing intervals and served sets) and note them again.
WORKLOAD = textwrap.dedent(
    """
    import json, pathlib, sys
    import numpy as np
    from numba.core.registry import CPUDispatcher
    from helpers.validation_files import write_validation_set
    from tempora_sim.engine import kernels as K
    from tempora_sim.sweeps import synthetic as syn
    from tempora_sim.sweeps.kernel_cache import compile_every_kernel
    from tempora_sim.sweeps.replay import run_sweep
    from tempora_sim.sweeps.traces import load_traces
    from tempora_sim.sweeps.variability import idle_curves, timing_models
    from tempora_sim.validation.live_runs import validate

    def signatures():
        return {n: sorted(map(str, d.signatures)) for n, d in vars(K).items()
                if isinstance(d, CPUDispatcher) and d.targetoptions.get("inline") != "always"}

    compile_every_kernel()
    before = signatures()
    tmp = sys.argv[1]
    var = syn.SyntheticVariability(0.0, 0.0, per_episode=8, gaps_ms=(2.0, 8.0), idle_factor=(1.2, 1.2))
    episodes = ("gaussian_noise", "fog")
    live, traces = write_validation_set(pathlib.Path(tmp), var, [np.ones(60)] * 2, (1.0, 0.25), episodes, 30)
    ts = load_traces(traces, cache=False)
    run = run_sweep(ts, protocols="all")
    curves = idle_curves(run.series, timing_models(ts.traces))
    run_sweep(ts, protocols="all", arrivals="poisson:1")
    validate([live], traces)
    print(json.dumps({"before": before, "after": signatures(), "idle_gaps": int(np.diff(curves[0]).sum())}))
    """
)


@pytest.mark.slow
def test_install_compiles_every_kernel_the_answers_call(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", WORKLOAD, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["idle_gaps"] > 0, "the workload must replay an idle effect"
    called = {name for name, sigs in got["after"].items() if sigs}
    assert {"discrete_kernel", "continuous_kernel", "amortised_kernel", "discrete_general_kernel", "discrete_idle_kernel"} <= called
    assert {"discrete_served", "offline_kernel", "response_delays", "amortised_prefixes"} <= called
    assert got["after"] == got["before"], "a kernel compiled after compile_every_kernel: warm it there"


def test_the_module_runs_as_a_program_and_says_what_it_did():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "tempora_sim.sweeps.kernel_cache"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("replay kernels in Numba's cache (") and out.stdout.rstrip().endswith(" s)")
