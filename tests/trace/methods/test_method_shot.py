"""SHOT-IM and SHOT-IM* (shot-norm): information maximisation, what is updated, BN statistics."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from helpers.methods import (
    batches,
    changed_parameters,
    check_frozen_changes_nothing,
    check_hparams,
    check_reset_bit_identical,
    check_snapshot_restore,
    context,
    demo_corrupted_stream,
    demo_method,
    run_stream,
    stream_accuracy,
    tiny_model,
)
from tempora_trace.methods import MethodError, get_method
from tempora_trace.methods.shot_im import information_maximisation_loss


def test_im_loss_rewards_confident_and_diverse_predictions():
    confident_one_class = torch.zeros(10, 10)
    confident_one_class[:, 0] = 20.0
    confident_diverse = 20.0 * torch.eye(10)
    uncertain = torch.zeros(10, 10)
    # plain-formula oracle: mean H(p_i) − H(mean p)
    assert information_maximisation_loss(confident_diverse).item() == pytest.approx(-math.log(10), abs=1e-3)
    assert information_maximisation_loss(confident_one_class).item() == pytest.approx(0.0, abs=1e-3)
    assert information_maximisation_loss(uncertain).item() == pytest.approx(0.0, abs=1e-3)


def test_first_step_is_sgd_on_the_im_loss_over_everything_but_the_head():
    x = batches(1)[0]
    model = tiny_model()
    oracle = copy.deepcopy(model)
    method = get_method("shot-im")(model, context())
    run_stream(method, [x])

    # independent oracle: BN in train mode on the source model, IM loss, one SGD(momentum) step
    oracle.train()
    logits = oracle(x)
    p = logits.softmax(1)
    loss = -(p * logits.log_softmax(1)).sum(1).mean() + (p.mean(0) * torch.log(p.mean(0) + 1e-5)).sum()
    loss.backward()
    for (name, after), (_, before) in zip(model.named_parameters(), oracle.named_parameters()):
        if name.startswith("fc."):
            assert torch.equal(after, before), "the classifier head must stay frozen"
        else:
            torch.testing.assert_close(after, before - 0.00025 * before.grad, rtol=1e-5, atol=1e-7)
            assert not torch.equal(after, before), f"{name} was not updated"
    # source statistics kept and tracked: running = 0.9 · source + 0.1 · batch
    torch.testing.assert_close(model.layer1[1].running_mean, oracle.layer1[1].running_mean)
    assert method.hparams()["source_stats"] == "keep"


def test_shot_norm_updates_norm_affine_only_and_discards_source_statistics():
    model = tiny_model()
    method = get_method("shot-norm")(model, context())
    assert not model.layer1[1].running_mean.any()  # discarded at set-up
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    run_stream(method, batches(2))
    changed = changed_parameters(before, model)
    assert changed == {"layer1.1.weight", "layer1.1.bias", "layer2.1.weight", "layer2.1.bias"}
    assert method.hparams()["source_stats"] == "discard"
    with pytest.raises(MethodError, match="shot-norm.*BatchNorm"):
        get_method("shot-norm")(tiny_model("gn"), context(norm="gn"))


def test_contract():
    xs = batches(4)
    for name, norm in (("shot-im", "bn"), ("shot-im", "gn"), ("shot-norm", "bn")):
        check_reset_bit_identical(get_method(name)(tiny_model(norm), context(norm=norm)), xs)
        check_snapshot_restore(get_method(name)(tiny_model(norm), context(norm=norm)), xs)
        check_frozen_changes_nothing(get_method(name)(tiny_model(norm), context(norm=norm)), xs[:2])
    hp = check_hparams(get_method("shot-im")(tiny_model(), context()), ("lr", "momentum", "source_stats", "diversity_eps"))
    assert hp["lr"] == 0.00025 and hp["momentum"] == 0.9


@pytest.mark.slow
def test_short_adaptation_beats_standard_on_corrupted_demo_data():
    """20 batches of 64 gaussian-noise (severity 5) demo images: shot-im serves clearly more
    correct predictions than the unadapted model (the paper's finding on BN models)."""
    stream = demo_corrupted_stream("gaussian_noise", 5)
    standard = stream_accuracy(demo_method("standard"), stream)
    adapted = stream_accuracy(demo_method("shot-im"), stream)
    assert adapted > standard + 5.0, (standard, adapted)
