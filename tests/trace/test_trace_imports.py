"""What a tracer process imports, and when: torchvision and ``torch._dynamo`` cost a process
about 1.5 s together (torchvision's operators import ``torch._dynamo``). A ``standard`` trace of
the demo model needs neither; a method that holds an optimiser has ``torch._dynamo`` imported
before any clock runs (its first step would import it), so no timed event pays for an import.
The process check runs in a fresh interpreter: this test process imported both long ago."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tempora_trace import runner

# standard traced first (nothing imported), then tent built: torch._dynamo is there before its run
SCRIPT = textwrap.dedent(
    """
    import sys
    from tempora_trace.config import TraceConfig
    from tempora_trace.runner import TraceRun

    def loaded():
        return ",".join(m for m in ("torchvision", "torch._dynamo") if m in sys.modules)

    for method in ("standard", "tent"):
        cfg = TraceConfig(method=method, dataset="demo", model="demo-resnet", domains=["fog"], batch_size=8, max_batches=1,
                          warmup_batches=0, timing_sample=0, threads=1, out=sys.argv[1] + "/" + method, quiet=True)
        run = TraceRun(cfg.resolved(), print)
        before = loaded()
        run.run()
        print(method + "|" + before + "|" + loaded())
    """
)


@pytest.mark.slow
def test_a_standard_trace_imports_neither_and_tent_has_dynamo_before_the_clock(tmp_path):
    env = dict(os.environ, TEMPORA_HOME=str(tmp_path / "home"), TEMPORA_DEMO_TEST_SIZE="16")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if "|" in ln]
    assert lines == ["standard||", "tent|torch._dynamo|torch._dynamo"]


@pytest.mark.parametrize(
    "method,preloads",
    [("standard", False), ("lame", False), ("tent", True), ("sar", True), ("memo", True), ("cotta", True)],
)
def test_which_methods_get_dynamo_before_the_clock(monkeypatch, method, preloads):
    """sar's optimiser is a wrapper (SAM) around one; memo and cotta hold theirs as attributes
    of their own. Checked on the decision, with the import itself replaced by a recorder."""
    from tempora_trace.methods import MethodContext, get_method
    from tempora_trace.models import get_model

    model, spec = get_model("demo-resnet", None, num_classes=10)
    context = MethodContext(
        num_classes=10, dataset_family="cifar", batch_size=8, device="cpu", model_name="demo-resnet", norm_kind=spec.norm
    )
    built = get_method(method)(model, context)
    imported = []
    monkeypatch.setattr(runner.importlib, "import_module", imported.append)
    runner.preload_optimiser_imports(built)
    assert imported == (["torch._dynamo"] if preloads else [])
