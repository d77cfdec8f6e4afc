"""The untimed shape warm-up: methods whose auxiliary pass runs on a data-dependent subset of
the batch warm every subset size once, and the warm-up leaves no trace in what follows."""

from __future__ import annotations

import pytest

from helpers.methods import batches, context, tiny_model
from tempora_trace.methods import builtin_methods, get_method
from tempora_trace.methods.testing import check_warm_up

#: methods whose adapt step runs a forward on a selected subset of the batch
SUBSET_PASSES = {"cmf", "deyo", "roid"}
#: methods whose adapt step runs on a memory bank of up to this many samples (RoTTA's default)
BANK_PASSES = {"rotta": 64}
#: options that fit the 8-px test images
SMALL = {"spa": {"image_size": 8, "noise_patch": 4}}


def build(name: str):
    cls = get_method(name)
    norm = "bn" if "bn" in cls.compatible_norms else sorted(cls.compatible_norms)[0]
    return cls(tiny_model(norm), context(norm=norm, batch_size=6), **SMALL.get(name, {}))


def sizes_seen(method, fn) -> list[int]:
    """Batch sizes of every forward of the method's model while ``fn`` runs."""
    seen: list[int] = []
    handle = method.model.register_forward_hook(lambda mod, args, out: seen.append(int(args[0].shape[0])))
    try:
        fn()
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("name", builtin_methods())
def test_warm_up_covers_the_subset_sizes_and_changes_nothing(name):
    xs = batches(3, batch_size=6)
    method = build(name)
    seen = sizes_seen(method, lambda: method.warm_up_shapes(xs[0]))
    if name in SUBSET_PASSES:
        # the auxiliary forward once at every size a selection can take
        assert sorted(seen) == [1, 2, 3, 4, 5, 6]
    elif name in BANK_PASSES:
        # the student's pass on the bank once at every size the bank can have
        assert sorted(seen) == list(range(1, BANK_PASSES[name] + 1))
    else:
        assert seen == []
    # the kit's check: every shape of the stream was warmed, no gradient left, and after the
    # warm-up and a reset the stream replays a fresh method's outputs bit for bit
    check_warm_up(lambda: build(name), xs)


def test_cmf_warm_up_runs_the_backward_of_each_size():
    method = build("cmf")
    grads: list[int] = []
    param = method.trainable[0]
    handle = param.register_hook(lambda g: grads.append(1))
    method.warm_up_shapes(batches(1, batch_size=4)[0])
    handle.remove()
    assert len(grads) == 4 and param.grad is None  # one backward per size, gradients dropped
