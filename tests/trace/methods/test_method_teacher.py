"""The teacher–student base class and the public update hook: the guide's worked example keeps
the contract, the teacher is part of the method's state, frozen mode predicts with the teacher,
a skipped batch learns nothing, and the update hook's former name still works, with a warning."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from helpers.methods import batches, check_reset_bit_identical, check_snapshot_restore, context, tiny_model
from tempora_trace import methods as registry
from tempora_trace.methods import GradientMethod, MethodRNG, softmax_entropy, stochastic_restore
from tempora_trace.methods.testing import CHECKS, assert_conforms

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "guide" / "add-a-method.md"


@pytest.fixture
def mean_teacher(tmp_path):
    """The guide's teacher–student example, saved as the file its title names."""
    block = re.search(r'```python title="mean_teacher.py"\n(.*?)```', GUIDE.read_text(encoding="utf-8"), re.S)
    assert block is not None
    path = tmp_path / "mean_teacher.py"
    path.write_text(block.group(1), encoding="utf-8")
    return registry.resolve_method(f"{path}:MeanTeacher").cls


def make(cls, **params):
    torch.manual_seed(0)
    return cls(tiny_model(), context(), **params)


def test_the_guides_teacher_student_example_passes_the_kit(mean_teacher):
    results = assert_conforms(mean_teacher, batches=3, batch_size=8)
    assert [r.name for r in results] == list(CHECKS)


def test_the_teacher_is_state_and_predicts(mean_teacher):
    method = make(mean_teacher, teacher_momentum=0.5)
    xs = batches(4)
    check_reset_bit_identical(method, xs)
    check_snapshot_restore(make(mean_teacher, teacher_momentum=0.5), xs)
    method.reset()
    method.predict(xs[0])
    method.adapt()
    assert method.last_updated is True
    snap = method.snapshot()
    assert set(snap["extra"]) == {"teacher", "rng"}
    # the prediction is the teacher's (batch statistics while adapting)
    with torch.no_grad():
        teacher_out = method.teacher(xs[1])
    torch.testing.assert_close(method.predict(xs[1]), teacher_out, rtol=0, atol=0)
    method.skip_adapt()
    # frozen: the teacher in eval mode on its running statistics, nothing changes
    method.freeze()
    assert not method.teacher.training
    before = {k: v.clone() for k, v in method.teacher.state_dict().items()}
    with torch.no_grad():
        eval_out = method.teacher(xs[2])
    torch.testing.assert_close(method.predict(xs[2]), eval_out, rtol=0, atol=0)
    method.adapt()
    assert method.last_updated is False
    assert all(torch.equal(v, method.teacher.state_dict()[k]) for k, v in before.items())
    method.unfreeze()
    assert method.teacher_bn_layers and all(m.training for m in method.teacher_bn_layers)


def test_a_skipped_batch_leaves_student_and_teacher_alone(mean_teacher):
    method = make(mean_teacher)
    x = batches(1)[0]
    before = method.snapshot()
    method.predict(x)
    method.skip_adapt()
    assert method.last_updated is False and method._pending is None
    after = method.snapshot()
    for name, value in before["model"].items():
        if "running" not in name and "num_batches" not in name:
            assert torch.equal(value, after["model"][name]), name
    for name, value in before["extra"]["teacher"].items():
        if "running" not in name and "num_batches" not in name:
            assert torch.equal(value, after["extra"]["teacher"][name]), name


def test_stochastic_restore_extremes():
    p = torch.nn.Parameter(torch.full((3, 4), 2.0))
    source = {"p": torch.zeros(3, 4)}
    stochastic_restore([("p", p)], source, 0.0, MethodRNG(0))
    assert torch.equal(p.data, torch.full((3, 4), 2.0))
    stochastic_restore([("p", p)], source, 1.0, MethodRNG(0))
    assert torch.equal(p.data, torch.zeros(3, 4))


def test_the_former_update_hook_name_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match="_update is deprecated"):

        class OldStyle(GradientMethod):
            name = "old-style"

            def _update(self, x, logits):
                self.called = True
                return GradientMethod._update(self, x, logits)

            def loss(self, x, logits):
                return softmax_entropy(logits).mean()

    method = make(OldStyle)
    method.predict(batches(1)[0])
    method.adapt()
    assert method.called and method.last_updated is True
