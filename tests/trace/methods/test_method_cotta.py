"""CoTTA against its formulas: the EMA teacher, the stochastic restore (seeded), the choice of
the augmentation branch against the anchor's confidence, the losses, and the published defaults."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from helpers.methods import batches, check_frozen_changes_nothing, check_updated_flag, context, tiny_model
from tempora_trace.methods import MethodError, MethodRNG, get_method
from tempora_trace.methods.base import MethodContext
from tempora_trace.methods.cotta import cotta_augment, soft_cross_entropy, symmetric_cross_entropy

CoTTA = get_method("cotta")


def make(model: nn.Module | None = None, **params):
    torch.manual_seed(0)  # the method's generator is seeded from torch's
    return CoTTA(model if model is not None else tiny_model(), context(), **params)


def params_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def batch_statistics_copy(model: nn.Module) -> nn.Module:
    """The source model normalising with batch statistics (what the anchor and the fresh teacher are)."""
    twin = copy.deepcopy(model)
    for m in twin.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.track_running_stats = False
            m.running_mean = None
            m.running_var = None
    return twin.train()


def test_published_defaults_per_dataset():
    cifar10 = CoTTA.default_params(MethodContext(num_classes=10, dataset_family="cifar"))
    cifar100 = CoTTA.default_params(MethodContext(num_classes=100, dataset_family="cifar"))
    imagenet = CoTTA.default_params(MethodContext(num_classes=1000, dataset_family="imagenet"))
    # the authors' cifar10/cotta.yaml, cifar100/cotta.yaml and imagenet configuration
    assert (cifar10["optimizer"], cifar10["lr"], cifar10["confidence_threshold"], cifar10["restore_probability"]) == (
        "adam",
        1e-3,
        0.92,
        0.01,
    )
    assert (cifar100["confidence_threshold"], cifar100["restore_probability"]) == (0.72, 0.01)
    assert (imagenet["optimizer"], imagenet["lr"], imagenet["confidence_threshold"], imagenet["restore_probability"]) == (
        "sgd",
        0.01,
        0.1,
        0.001,
    )
    for d in (cifar10, cifar100, imagenet):
        assert d["teacher_momentum"] == 0.999 and d["n_augmentations"] == 32
    assert (cifar10["augment"], imagenet["augment"]) == ("always", "when_unsure")
    assert (cifar10["loss"], imagenet["loss"]) == ("cross_entropy", "symmetric")


def test_every_weight_and_bias_is_adapted_and_the_optimiser_is_the_published_one():
    method = make()
    names = {n for n, _ in method.adapted}
    assert names == {n for n, _ in method.model.named_parameters()}  # the tiny model's parameters are all weights and biases
    assert isinstance(method.optimizer, torch.optim.Adam) and method.optimizer.defaults["betas"] == (0.9, 0.999)
    sgd = CoTTA(tiny_model(), MethodContext(num_classes=10, dataset_family="imagenet"))
    assert isinstance(sgd.optimizer, torch.optim.SGD) and sgd.optimizer.defaults["nesterov"] and sgd.optimizer.defaults["momentum"] == 0.9


def test_options_are_checked_in_one_line():
    for bad in ({"augment": "sometimes"}, {"optimizer": "rmsprop"}, {"loss": "kl"}, {"restore_probability": 1.5}, {"n_augmentations": 0}):
        with pytest.raises(MethodError):
            make(**bad)


def test_ema_teacher_follows_its_formula():
    """After one step without restore: teacher = α·source + (1 − α)·student after the step."""
    alpha = 0.9  # a visible step; the published 0.999 runs the same code
    method = make(teacher_momentum=alpha, restore_probability=0.0, n_augmentations=2)
    source = params_of(method.teacher)
    x = batches(1)[0]
    method.predict(x)
    method.adapt()
    assert method.last_updated is True
    student = params_of(method.model)
    moved = 0
    for name, t in method.teacher.named_parameters():
        expected = alpha * source[name] + (1 - alpha) * student[name]
        torch.testing.assert_close(t.detach(), expected, rtol=0, atol=1e-6)
        moved += int(not torch.equal(student[name], source[name]))
    assert moved > 0


def test_stochastic_restore_follows_its_formula_seeded():
    """Each element returns to its source value iff a uniform draw from the method's generator
    (state as after the prediction) is below p, parameter by parameter in the adapted order;
    the teacher's EMA uses the student before the restore."""
    p = 0.3
    restoring = make(restore_probability=p, n_augmentations=2)
    plain = make(restore_probability=0.0, n_augmentations=2)
    source = {n: v.clone() for n, v in restoring.source_values.items()}
    x = batches(1)[0]
    torch.testing.assert_close(restoring.predict(x), plain.predict(x), rtol=0, atol=0)
    gen = torch.Generator().manual_seed(0)
    gen.set_state(restoring.rng.get("cpu").get_state())
    restoring.adapt()
    plain.adapt()
    stepped = params_of(plain.model)  # the same step, nothing restored
    restored = total = 0
    for name, param in restoring.adapted:
        mask = torch.rand(param.shape, generator=gen) < p
        expected = torch.where(mask, source[name], stepped[name])
        assert torch.equal(param.detach(), expected), name
        restored += int(mask.sum())
        total += mask.numel()
    assert 0.2 < restored / total < 0.4
    for (name, t), (_, u) in zip(restoring.teacher.named_parameters(), plain.teacher.named_parameters()):
        assert torch.equal(t, u), name


@pytest.mark.parametrize("augment", ["when_unsure", "always"])
def test_augmentation_branch_follows_the_anchor_confidence(augment):
    x = batches(1)[0]
    source = tiny_model()
    with torch.no_grad():
        confidence = batch_statistics_copy(source)(x).softmax(1).max(1).values.mean().item()
        standard = batch_statistics_copy(source)(x)

    # anchor sure (threshold below its confidence): the teacher's plain output
    sure = make(copy.deepcopy(source), confidence_threshold=confidence - 1e-3, n_augmentations=3, augment=augment)
    before = sure.rng.get("cpu").get_state().clone()
    out = sure.predict(x)
    assert sure.last_augmented is False and abs(sure.last_anchor_confidence - confidence) < 1e-6
    torch.testing.assert_close(out, standard, rtol=0, atol=1e-5)
    # "always" runs the augmented forwards anyway (they draw random numbers), "when_unsure" does not
    assert torch.equal(sure.rng.get("cpu").get_state(), before) is (augment == "when_unsure")

    # anchor unsure: the mean of the teacher's outputs over the augmented copies
    unsure = make(copy.deepcopy(source), confidence_threshold=confidence + 1e-3, n_augmentations=3, augment=augment)
    gen = torch.Generator().manual_seed(0)
    gen.set_state(unsure.rng.get("cpu").get_state())
    out = unsure.predict(x)
    assert unsure.last_augmented is True
    teacher = batch_statistics_copy(source)
    with torch.no_grad():
        expected = torch.stack([teacher(cotta_augment(x, gen)) for _ in range(3)]).mean(0)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


def test_augmented_views_leave_the_tracked_statistics_to_the_clean_forward():
    method = make(confidence_threshold=1.0, n_augmentations=2, source_stats="keep", bn_momentum=0.5)
    x = batches(1)[0]
    bn = method.teacher_bn_layers[0]
    start = bn.running_mean.clone()
    method.predict(x)
    with torch.no_grad():
        h = method.teacher.layer1[0](x - 0.5)
    expected = 0.5 * start + 0.5 * h.mean((0, 2, 3))
    torch.testing.assert_close(bn.running_mean, expected, rtol=0, atol=1e-6)


def test_losses_against_hand_computation():
    student = torch.tensor([[2.0, 0.0, -1.0]])
    teacher = torch.tensor([[0.5, 0.5, 0.0]])
    ps = torch.exp(student) / torch.exp(student).sum()
    pt = torch.exp(teacher) / torch.exp(teacher).sum()
    ce = -(pt * torch.log(ps)).sum()
    ce_back = -(ps * torch.log(pt)).sum()
    torch.testing.assert_close(soft_cross_entropy(student, teacher), ce.reshape(1))
    torch.testing.assert_close(symmetric_cross_entropy(student, teacher), (0.5 * ce + 0.5 * ce_back).reshape(1))


def test_augmentation_is_one_draw_per_copy_and_stays_in_range():
    x = batches(1, size=16)[0]
    a = cotta_augment(x, MethodRNG(3).get("cpu"))
    b = cotta_augment(x, MethodRNG(3).get("cpu"))
    assert torch.equal(a, b) and a.shape == x.shape and a.min() >= 0 and a.max() <= 1
    assert not torch.equal(a, cotta_augment(x, MethodRNG(4).get("cpu")))


def test_frozen_predicts_with_the_teacher_on_running_statistics():
    method = make(n_augmentations=2)
    xs = batches(3)
    check_frozen_changes_nothing(method, xs, warmup=1)
    method.freeze()
    teacher = copy.deepcopy(method.teacher).eval()
    with torch.no_grad():
        torch.testing.assert_close(method.predict(xs[0]), teacher(xs[0]), rtol=0, atol=0)


def test_every_batch_reports_an_update_and_the_kit_agrees():
    method = make(n_augmentations=2)
    assert check_updated_flag(method, batches(3)) == "batches reporting updated: 2 true, 0 false"


def test_a_skipped_batch_learns_nothing():
    method = make(n_augmentations=2)
    x = batches(1)[0]
    before = params_of(method.teacher), params_of(method.model)
    method.predict(x)
    method.skip_adapt()
    assert method.last_updated is False
    for got, want in zip((params_of(method.teacher), params_of(method.model)), before):
        assert all(torch.equal(got[k], want[k]) for k in want)
