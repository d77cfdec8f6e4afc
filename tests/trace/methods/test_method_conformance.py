"""The conformance kit (tempora_trace.methods.testing, `tempora-trace check-method`): every
built-in method passes every check, and deliberately broken methods fail exactly the checks
that describe what is broken in them."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from tempora_trace.cli import main
from tempora_trace.methods import GradientMethod, MethodContext, TTAMethod, builtin_methods, check_params, get_method, softmax_entropy
from tempora_trace.methods.testing import CHECKS, assert_conforms, check_method

#: small enough for the suite (the CLI's default is 6 batches of 16)
SMALL = {"batches": 3, "batch_size": 8}


@pytest.mark.parametrize("name", builtin_methods())
def test_every_built_in_method_passes_every_check(name):
    results = assert_conforms(name, **SMALL)
    assert [r.name for r in results] == list(CHECKS) and all(r.ok for r in results)


# ------------------------------------------------------------------------ broken methods
class Forgetful(TTAMethod):
    """Keeps a counter that changes its outputs outside the model and extra_state(): reset and
    restore cannot bring it back."""

    name = "forgetful"
    family = "baseline"

    def __init__(self, model, context, **params):
        super().__init__(model, context, **params)
        self.seen = 0

    @torch.no_grad()
    def predict(self, x):
        return self.model(x) * (1.0 + 0.1 * self.seen)

    def adapt(self):
        if not self.frozen:
            self.seen += 1


class Clocked(GradientMethod):
    """Tent's loss, but it times itself and waits for the device."""

    name = "clocked"

    def predict(self, x):
        self.started = time.perf_counter()
        return super().predict(x)

    def loss(self, x, logits):
        torch.cpu.synchronize()
        return softmax_entropy(logits).mean()


class StepsInPredict(GradientMethod):
    """Learns from the batch before returning its prediction: backward and step in predict."""

    name = "steps-in-predict"

    def predict(self, x):
        if self.frozen:
            return super().predict(x)
        with torch.enable_grad():
            logits = self.model(x)
            softmax_entropy(logits).mean().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.last_updated = True
        return logits.detach()

    def adapt(self):
        self.last_updated = False


class Unchecked(TTAMethod):
    """An option used without validation: `--param temperature=abc` would be a traceback."""

    name = "unchecked"
    family = "baseline"

    @classmethod
    def default_params(cls, context):
        return {"temperature": 1.0}

    @torch.no_grad()
    def predict(self, x):
        return self.model(x) / self.params["temperature"]


class Checked(Unchecked):
    name = "checked"

    def __init__(self, model, context, **params):
        super().__init__(model, context, **params)
        check_params(self, non_negative=("temperature",))


class ColdSubset(GradientMethod):
    """An auxiliary pass on a subset whose size changes from batch to batch, with no
    warm_up_shapes: the first pass at each size lands in a timed event."""

    name = "cold-subset"

    def __init__(self, model, context, **params):
        super().__init__(model, context, **params)
        self.steps = 0

    def loss(self, x, logits):
        self.steps += 1
        k = 1 + self.steps % (x.shape[0] - 1)
        view = self.auxiliary_forward(x[:k].flip(3))
        return softmax_entropy(logits).mean() + F.kl_div(view.log_softmax(1), logits[:k].softmax(1), reduction="batchmean")

    def extra_state(self):
        return {"steps": self.steps}

    def load_extra_state(self, state):
        self.steps = state["steps"]


class Silent(GradientMethod):
    """Tent's step, reported as no update: the amortised replay would treat it as never adapting."""

    name = "silent"

    def loss(self, x, logits):
        return softmax_entropy(logits).mean()

    def update(self, x, logits):
        super().update(x, logits)
        return False


class Boastful(TTAMethod):
    """Reports an update on every batch and changes nothing."""

    name = "boastful"
    family = "baseline"

    @torch.no_grad()
    def predict(self, x):
        return self.model(x)

    def adapt(self):
        self.last_updated = not self.frozen


class LayerNormTent(get_method("tent")):
    """A correct method that runs on LayerNorm models only: checked around the kit's own small
    LayerNorm network (no demo model has LayerNorm layers)."""

    name = "layernorm-tent"
    compatible_norms = frozenset({"ln"})


@pytest.mark.parametrize(
    "cls, failing",
    [
        (Forgetful, {"reset", "snapshot-restore", "warm-up"}),
        (Clocked, {"no-sync"}),
        (StepsInPredict, {"predict-adapt", "updated"}),
        (Silent, {"updated"}),
        (Boastful, {"updated"}),
        (Unchecked, {"options"}),
        (Checked, set()),
        (LayerNormTent, set()),
        (ColdSubset, {"warm-up"}),
    ],
)
def test_broken_methods_fail_the_checks_that_name_their_fault(cls, failing):
    results = {r.name: r for r in check_method(cls, **SMALL)}
    assert {n for n, r in results.items() if not r.ok} == failing, [r.line() for r in results.values()]


def test_failure_lines_say_what_is_wrong():
    results = {r.name: r for r in check_method(Clocked, **SMALL, checks=("no-sync",))}
    assert list(results) == ["no-sync"]
    line = results["no-sync"].line()
    assert line.startswith("FAIL no-sync: predict calls time.perf_counter; adapt calls torch.cpu.synchronize")
    warm = check_method(ColdSubset, **SMALL, checks=("warm-up",))[0].line()
    assert "met input shape [" in warm and "override warm_up_shapes()" in warm
    options = check_method(Unchecked, **SMALL, checks=("options",))[0].line()
    assert (
        options
        == "FAIL options: option temperature='not-a-number' was accepted (default 1.0; validate it: tempora_trace.methods.check_params)"
    )


def test_a_clock_read_by_another_librarys_gc_callback_is_not_the_methods():
    """A garbage collection inside predict runs every gc callback (test libraries time their
    collections with a clock): the kit does not blame the method for those calls, and still
    catches the method's own clock read in the same batch."""
    import gc

    class Collecting(Checked):
        name = "collecting"

        def predict(self, x):
            gc.collect()
            return super().predict(x)

    class CollectingClocked(Collecting):
        name = "collecting-clocked"

        def predict(self, x):
            out = super().predict(x)
            time.perf_counter()
            return out

    def timed_collections(phase, info):
        time.perf_counter()

    gc.callbacks.append(timed_collections)
    try:
        ok = check_method(Collecting, **SMALL, checks=("no-sync",))[0]
        caught = check_method(CollectingClocked, **SMALL, checks=("no-sync",))[0]
    finally:
        gc.callbacks.remove(timed_collections)
    assert ok.ok, ok.line()
    assert caught.line().startswith("FAIL no-sync: predict calls time.perf_counter")
    assert timed_collections not in gc.callbacks and len([c for c in gc.callbacks if c.__name__ in ("first", "last")]) == 0


def test_a_method_that_does_not_build_fails_build_and_skips_the_rest():
    class Broken(Checked):
        name = "broken"

        def __init__(self, model, context, **params):
            raise RuntimeError("no model for me")

    results = check_method(Broken, **SMALL)
    assert [r.ok for r in results] == [False] * len(CHECKS)
    assert results[0].line() == "FAIL build: raised in __init__: RuntimeError: no model for me"
    assert all(r.message == "not run: the method does not build" for r in results[1:])


CLOCKED_FILE = """
import time

from tempora_trace.methods import GradientMethod, softmax_entropy


class Clocked(GradientMethod):
    name = "clocked"

    def loss(self, x, logits):
        time.perf_counter()
        return softmax_entropy(logits).mean()
"""


def test_the_kit_builds_a_method_with_its_kit_options_and_names_them(capsys):
    # MEMO's 32 views per image make the kit's replays minutes long; its kit option makes them 4
    assert main(["check-method", "memo", "--batches", "2", "--batch-size", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("on 2 demo batches of 2 (kit options: n_augmentations=4)")
    seen = []
    real = get_method("memo").__init__

    def spy(self, model, context, **params):
        seen.append(params.get("n_augmentations"))
        real(self, model, context, **params)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(get_method("memo"), "__init__", spy)
        check_method("memo", batches=1, batch_size=2, checks=("build",))
        kit, seen[:] = list(seen), []
        check_method("memo", {"n_augmentations": 2}, batches=1, batch_size=2, checks=("build",))
    assert kit and set(kit) == {4} and seen and set(seen) == {2}  # --param wins over the kit's option
    assert main(["check-method", "memo", "--param", "n_augmentations=2", "--batches", "2", "--batch-size", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("on 2 demo batches of 2")


def test_check_method_command(tmp_path, capsys):
    assert main(["check-method", "tent", "--batches", "3", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "checking tent (the built-in tempora_trace.methods.tent:Tent) on 3 demo batches of 8"
    assert [line.split()[0] for line in out[1:-1]] == ["ok"] * len(CHECKS)
    assert out[-1] == f"tent: {len(CHECKS)} of {len(CHECKS)} checks passed"

    file = tmp_path / "clocked.py"
    file.write_text(CLOCKED_FILE, encoding="utf-8")
    assert main(["check-method", f"{file}:Clocked", "--batches", "3", "--batch-size", "8"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("FAIL")] == [
        "FAIL no-sync: adapt calls time.perf_counter (the tracer owns the clock and the synchronisation)"
    ]
    assert out[-1] == f"clocked: {len(CHECKS) - 1} of {len(CHECKS)} checks passed"

    assert main(["check-method", "no-such-method"]) == 2
    assert "unknown method 'no-such-method'" in capsys.readouterr().err


def test_kit_imports_without_pytest(monkeypatch):
    import importlib
    import sys

    # the kit module (and whatever it imports afresh) must not need pytest
    monkeypatch.setitem(sys.modules, "pytest", None)
    monkeypatch.delitem(sys.modules, "tempora_trace.methods.testing")
    kit = importlib.import_module("tempora_trace.methods.testing")
    assert kit.CHECKS == CHECKS


def test_options_are_recorded_as_given():
    context = MethodContext(num_classes=10, dataset_family="cifar", batch_size=8)
    from tempora_trace.methods.testing import demo_model

    method = Checked(demo_model("bn"), context, temperature=2)
    assert method.hparams() == {"temperature": 2.0, "profile": "default"}
