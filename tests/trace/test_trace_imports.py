"""What a tracer process imports, and when: torchvision and ``torch._dynamo`` cost a process
about 1.5 s together (torchvision's operators import ``torch._dynamo``). Listing the methods
imports every method module and neither of them; a ``standard`` trace of the demo model needs
neither; a method that holds an optimiser has ``torch._dynamo`` imported before any clock runs
(its first step would import it), and a method that draws augmented views has torchvision's
transforms imported when it is built (:mod:`tempora_trace.methods.lazy_imports`), so no timed
event pays for an import. The process check runs in a fresh interpreter: this test process
imported both long ago."""

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
    from tempora_trace.catalogue import catalogue_lines
    from tempora_trace.config import TraceConfig
    from tempora_trace.runner import TraceRun

    def loaded():
        return ",".join(m for m in ("torchvision", "torch._dynamo") if m in sys.modules)

    for method in ("standard", "tent", "list", "cmf"):
        if method == "list":  # every method module imported, as `tempora-trace list` does
            list(catalogue_lines())
            print("list|" + loaded())
            continue
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
    assert lines == [
        "standard||",
        "tent|torch._dynamo|torch._dynamo",
        "list|torch._dynamo",
        "cmf|torchvision,torch._dynamo|torchvision,torch._dynamo",
    ]


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


#: the built-in methods whose modules declare a module imported on use (torchvision's transforms)
LAZY_USERS = ["cmf", "cotta", "deyo", "memo", "roid", "rotta", "spa", "zerosiam"]


@pytest.mark.parametrize("method", LAZY_USERS)
def test_no_event_imports_a_module_once_the_tracer_prepared_the_method(monkeypatch, method):
    """Every lazily imported module unloaded, the method built and prepared as the tracer does
    (``preload_imports``), then two events: none loads a declared module or looks for any
    module not imported yet."""
    import importlib.abc
    import sys

    from tempora_trace.methods import MethodContext, get_method, lazy_imports
    from tempora_trace.methods.testing_stream import DEMO_MODELS, demo_batches, demo_model

    for lazy in lazy_imports._DECLARED:
        monkeypatch.setattr(lazy, "module", None)
        monkeypatch.setitem(lazy._owner, lazy._binding, lazy)
    cls = get_method(method)
    norm = "bn" if "bn" in cls.compatible_norms else "gn"
    context = MethodContext(
        num_classes=10, dataset_family="cifar", batch_size=4, device="cpu", model_name=DEMO_MODELS[norm], norm_kind=norm
    )
    built = cls(demo_model(norm), context, **cls.kit_params)
    runner.preload_imports(built)
    assert lazy_imports.load_pending() == []
    xs = demo_batches(2, 4)
    found: list[str] = []

    class Recorder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            found.append(name)
            return None

    real_load = lazy_imports.LazyModule.load

    def load(self):
        if self.module is None:
            found.append(self.name)
        return real_load(self)

    monkeypatch.setattr(lazy_imports.LazyModule, "load", load)
    monkeypatch.setattr(sys, "meta_path", [Recorder(), *sys.meta_path])
    for x in xs:
        built.predict(x)
        built.adapt()
    assert found == []


BROKEN = """
from tempora_trace.methods import TTAMethod
from tempora_trace.methods.lazy_imports import lazy_module

TV = lazy_module("no_such_library.transforms", globals(), "TV")


class Broken(TTAMethod):
    name = "broken-lazy"
    family = "baseline"

    def predict(self, x):
        return self.model(x)

    def adapt(self):
        pass
"""


@pytest.mark.usefixtures("tiny_models", "one_thread")
def test_a_declared_module_that_does_not_import_is_one_line_and_poisons_nothing(tmp_path, cifar_c_root, capsys, monkeypatch):
    from helpers.cifar import tiny_cifar_args
    from tempora_trace.cli import main
    from tempora_trace.methods import lazy_imports

    monkeypatch.setattr(lazy_imports, "_DECLARED", list(lazy_imports._DECLARED))
    (tmp_path / "broken.py").write_text(BROKEN)
    out = tmp_path / "out"
    assert main(["run", "--method", f"{tmp_path / 'broken.py'}:Broken", *tiny_cifar_args(str(cifar_c_root), str(out))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tempora-trace: error: ") and "Traceback" not in err
    assert "broken.py needs module 'no_such_library.transforms'" in err and "No module named 'no_such_library'" in err
    assert not out.exists()
    # the refused declaration is dropped: another method's run in this process goes on
    assert main(["run", "--method", "tent", *tiny_cifar_args(str(cifar_c_root), str(out))]) == 0
