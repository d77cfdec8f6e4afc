"""What a tracer process imports, and when: torchvision and ``torch._dynamo`` cost a process
about 1.5 s together (torchvision's operators import ``torch._dynamo``). A ``standard`` trace of
the demo model needs neither; a method that holds an optimiser has ``torch._dynamo`` imported
before any clock runs (its first step would import it), so no timed event pays for an import.
Each check runs in a fresh interpreter: this test process has imported both long ago."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    from tempora_trace.config import TraceConfig
    from tempora_trace.runner import TraceRun

    cfg = TraceConfig(method=sys.argv[1], dataset="demo", model="demo-resnet", domains=["fog"], batch_size=8,
                      max_batches=1, warmup_batches=0, timing_sample=0, threads=1, out=sys.argv[2], quiet=True)
    run = TraceRun(cfg.resolved(), print)
    before = [m for m in ("torchvision", "torch._dynamo") if m in sys.modules]
    run.run()
    after = [m for m in ("torchvision", "torch._dynamo") if m in sys.modules]
    print(",".join(before) + "|" + ",".join(after))
    """
)


def _imports(method: str, tmp_path) -> tuple[list[str], list[str]]:
    env = dict(os.environ, TEMPORA_HOME=str(tmp_path / "home"), TEMPORA_DEMO_TEST_SIZE="16")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, method, str(tmp_path / method)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    before, after = proc.stdout.strip().splitlines()[-1].split("|")
    return [m for m in before.split(",") if m], [m for m in after.split(",") if m]


@pytest.mark.slow
def test_a_standard_trace_imports_neither_torchvision_nor_dynamo(tmp_path):
    assert _imports("standard", tmp_path) == ([], [])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["tent", "sar"])  # sar: its optimiser is a wrapper (SAM) around one
def test_a_method_with_an_optimiser_has_dynamo_before_the_clock(tmp_path, method):
    before, after = _imports(method, tmp_path)
    assert "torch._dynamo" in before and "torchvision" not in after
