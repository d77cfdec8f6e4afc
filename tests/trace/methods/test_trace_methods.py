"""standard / adabn / tent against hand-written oracles: what each updates, reset restores
bit-identical predictions, snapshot/restore is exact, frozen mode changes nothing."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from tempora_trace.methods import MethodContext, MethodError, available_methods, get_method


def net(norm="bn"):
    torch.manual_seed(0)
    layer = nn.BatchNorm2d(4) if norm == "bn" else nn.GroupNorm(2, 4)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), layer, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))
    with torch.no_grad():  # non-trivial source statistics, so "discard" is observable
        model[1].running_mean.uniform_(-1, 1) if norm == "bn" else None
    return model.eval()


CTX = MethodContext(num_classes=5, dataset_family="cifar", batch_size=6)


def batches(k=3):
    g = torch.Generator().manual_seed(1)
    return [torch.rand(6, 3, 8, 8, generator=g) for _ in range(k)]


def build(name, model=None, **params):
    return get_method(name)(model if model is not None else net(), CTX, **params)


def test_registry_has_the_three_methods():
    assert {"standard", "adabn", "tent"} <= set(available_methods())
    with pytest.raises(MethodError, match="unknown method"):
        get_method("nope")


def test_standard_is_the_eval_mode_model():
    reference = net()
    method = build("standard")
    for x in batches():
        assert torch.equal(method.predict(x), reference(x))
        method.adapt()
        assert method.last_updated is False
    assert torch.equal(method.model[1].running_mean, reference[1].running_mean)


def test_adabn_normalises_with_batch_statistics_and_tracks_them():
    method = build("adabn")
    ref = net()
    bn = ref[1]
    x = batches(1)[0]
    with torch.no_grad():
        h = ref[0](x)
        mu, var = h.mean((0, 2, 3)), h.var((0, 2, 3), unbiased=False)
        normed = (h - mu[None, :, None, None]) / torch.sqrt(var[None, :, None, None] + bn.eps)
        expected = ref[5](ref[4](ref[3](ref[2](normed * bn.weight[None, :, None, None] + bn.bias[None, :, None, None]))))
    torch.testing.assert_close(method.predict(x), expected)
    # source statistics discarded: buffers started at (0, 1) and moved by momentum 0.1
    torch.testing.assert_close(method.model[1].running_mean, 0.1 * mu)
    assert method.last_updated is True
    assert all(not p.requires_grad for p in method.model.parameters())


def test_adabn_keep_source_statistics_option():
    source_mean = net()[1].running_mean.clone()
    method = build("adabn", source_stats="keep")
    assert torch.equal(method.model[1].running_mean, source_mean)
    with pytest.raises(MethodError):
        build("adabn", source_stats="maybe")


def test_tent_takes_one_sgd_step_on_the_entropy_of_norm_affine_params():
    method = build("tent")
    oracle = net()
    for m in oracle.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.train()
    affine = [oracle[1].weight, oracle[1].bias]
    opt = torch.optim.SGD(affine, lr=0.00025, momentum=0.9)
    for x in batches():
        logits = oracle(x)
        loss = -(logits.softmax(1) * logits.log_softmax(1)).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        expected_prediction = logits.detach()
        opt.step()
        got = method.predict(x)
        torch.testing.assert_close(got, expected_prediction)  # predict-then-adapt: output before the step
        method.adapt()
        assert method.last_updated
    torch.testing.assert_close(method.model[1].weight, oracle[1].weight)
    torch.testing.assert_close(method.model[1].bias, oracle[1].bias)
    assert torch.equal(method.model[0].weight, net()[0].weight)  # conv untouched
    assert torch.equal(method.model[5].weight, net()[5].weight)  # head untouched


def test_tent_defaults_follow_the_reference():
    tent = get_method("tent")
    assert tent.default_params(CTX)["lr"] == 0.00025
    vit_ctx = MethodContext(num_classes=1000, norm_kind="ln")
    assert tent.default_params(vit_ctx)["lr"] == 0.001
    assert build("tent").hparams() == {"lr": 0.00025, "momentum": 0.9, "bn_momentum": 0.1, "source_stats": "discard", "profile": "default"}


@pytest.mark.parametrize("name", ["standard", "adabn", "tent"])
def test_reset_restores_bit_identical_predictions(name):
    method = build(name)
    xs = batches()
    first = []
    for x in xs:
        first.append(method.predict(x).clone())
        method.adapt()
    method.reset()
    for x, expected in zip(xs, first):
        assert torch.equal(method.predict(x), expected)
        method.adapt()


@pytest.mark.parametrize("name", ["adabn", "tent"])
def test_snapshot_restore_and_frozen_mode_leave_the_adapt_path_unchanged(name):
    plain, probed = build(name), build(name)
    for i, x in enumerate(batches(4)):
        if i == 2:
            snap = probed.snapshot()
            probed.freeze()
            frozen_out = probed.predict(x)
            probed.adapt()
            assert probed.last_updated is False
            probed.unfreeze()
            probed.restore(snap)
            # frozen = eval-mode BN on the tracked running statistics
            ref = copy.deepcopy(probed.model).eval()
            with torch.no_grad():
                torch.testing.assert_close(frozen_out, ref(x))
        a, b = plain.predict(x), probed.predict(x)
        plain.adapt()
        probed.adapt()
        assert torch.equal(a, b)
    for (k, va), vb in zip(plain.model.state_dict().items(), probed.model.state_dict().values()):
        assert torch.equal(va, vb), k


def test_tent_works_on_group_norm_and_adabn_declares_bn_only():
    method = build("tent", model=net("gn"))
    x = batches(1)[0]
    before = method.model[1].weight.clone()
    method.predict(x)
    method.adapt()
    assert not torch.equal(before, method.model[1].weight)
    assert get_method("adabn").compatible_norms == frozenset({"bn"})
