"""MEMO against direct formulas: the marginal entropy, the prior-mixed BatchNorm, one SGD step
per test point from the source model (written out here with autograd), the per-sample reset,
and the AugMix geometry against PIL. The conformance kit runs on it in
test_method_conformance.py (every built-in)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn as nn
from PIL import Image

from tempora_trace.methods import MethodContext, MethodError, get_method
from tempora_trace.methods.memo import DRAWS_PER_VIEW, Draws, PriorBatchNorm2d, _affine, _as_uint8, _rotate, marginal_entropy
from tempora_trace.methods.testing import demo_batches, demo_model

CIFAR = MethodContext(num_classes=10, dataset_family="cifar", batch_size=4, model_name="demo-resnet")


def test_marginal_entropy_is_the_entropy_of_the_mean_prediction() -> None:
    logits = torch.randn(7, 5, generator=torch.Generator().manual_seed(0)) * 3
    p = logits.softmax(1).mean(0)
    assert float(marginal_entropy(logits)) == pytest.approx(float(-(p * p.log()).sum()), rel=1e-6)
    # one view: the ordinary entropy; identical views: the same
    single = logits[:1].softmax(1)[0]
    assert float(marginal_entropy(logits[:1].repeat(4, 1))) == pytest.approx(float(-(single * single.log()).sum()), rel=1e-6)


def test_prior_batchnorm_mixes_source_and_batch_statistics() -> None:
    bn = nn.BatchNorm2d(3)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(3, generator=gen))
        bn.running_var.copy_(torch.rand(3, generator=gen) + 0.5)
        bn.weight.copy_(torch.rand(3, generator=gen) + 0.5)
        bn.bias.copy_(torch.randn(3, generator=gen))
    buffers = (bn.running_mean.clone(), bn.running_var.clone())
    bn.__class__ = PriorBatchNorm2d
    bn.prior = 16 / 17
    x = torch.randn(5, 3, 4, 4, generator=gen) * 2 + 1
    mean = bn.prior * buffers[0] + (1 - bn.prior) * x.mean((0, 2, 3))
    var = bn.prior * buffers[1] + (1 - bn.prior) * x.var((0, 2, 3), unbiased=True)
    want = (x - mean.view(1, 3, 1, 1)) / torch.sqrt(var.view(1, 3, 1, 1) + bn.eps) * bn.weight.view(1, 3, 1, 1) + bn.bias.view(1, 3, 1, 1)
    for mode in (True, False):
        bn.train(mode)
        torch.testing.assert_close(bn(x), want)
    torch.testing.assert_close(bn.running_mean, buffers[0])  # the buffers never move


def test_each_point_is_one_step_from_the_source_then_reset() -> None:
    """The prediction of each image is the source model after one SGD step on the marginal
    entropy of that image's views (recomputed here), and the model is the source again after."""
    torch.manual_seed(11)
    method = get_method("memo")(demo_model("bn"), CIFAR, n_augmentations=6)
    torch.manual_seed(11)
    twin = get_method("memo")(demo_model("bn"), CIFAR, n_augmentations=6)  # same generator: the same views
    source = copy.deepcopy(twin.model)
    x = demo_batches(1, 3)[0]
    out = method.predict(x)
    method.adapt()
    assert method.last_updated is False
    for p, q in zip(method.model.parameters(), source.parameters()):
        assert torch.equal(p, q)
    lr = method.params["lr"]
    for i, img in enumerate(x):
        views = twin.views(img)
        model = copy.deepcopy(source)
        params = list(model.parameters())
        logits = model(views)
        mean = logits.softmax(1).mean(0)
        grads = torch.autograd.grad(-(mean * mean.log()).sum(), params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= lr * g
            want = model(img.unsqueeze(0))
        torch.testing.assert_close(out[i : i + 1], want, rtol=1e-4, atol=1e-5)
    # and the step mattered: the source model alone predicts otherwise
    with torch.no_grad():
        assert not torch.allclose(out, source(x), atol=1e-6)


def test_frozen_is_the_source_model() -> None:
    method = get_method("memo")(demo_model("bn"), CIFAR, n_augmentations=4)
    x = demo_batches(1, 4)[0]
    method.freeze()
    with torch.no_grad():
        torch.testing.assert_close(method.predict(x), method.model(x))


def test_views_are_images_drawn_from_the_method_generator() -> None:
    torch.manual_seed(3)
    a = get_method("memo")(demo_model("bn"), CIFAR, n_augmentations=5)
    torch.manual_seed(3)
    b = get_method("memo")(demo_model("bn"), CIFAR, n_augmentations=5)
    img = demo_batches(1, 1)[0][0]
    va, vb = a.views(img), b.views(img)
    assert va.shape == (5, 3, 32, 32) and torch.equal(va, vb)
    assert float(va.min()) >= 0 and float(va.max()) <= 1
    assert not torch.equal(va[0], va[1])
    assert len(Draws(torch.Generator().manual_seed(0)).values) == DRAWS_PER_VIEW


def _pil_affine(img: torch.Tensor, matrix) -> np.ndarray:
    pil = Image.fromarray(_as_uint8(img).permute(1, 2, 0).numpy())
    out = pil.transform(pil.size, Image.AFFINE, matrix, resample=Image.BILINEAR, fillcolor=(128, 128, 128))
    return np.asarray(out).astype(int)


@pytest.mark.parametrize("matrix", [(1, 0, 1, 0, 1, 0), (1, 0, 0, 0, 1, -1), (1, 0.03, 0, 0, 1, 0), (1, 0, 0, -0.02, 1, 0)])
def test_affine_matches_pil(matrix) -> None:
    img = _as_uint8(torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(2))).float() / 255
    ours = _as_uint8(_affine(img, matrix)).permute(1, 2, 0).numpy().astype(int)
    theirs = _pil_affine(img, matrix)
    assert np.abs(ours - theirs).max() <= 1


def test_rotation_matches_pil() -> None:
    """Level draw 0.99 and sign draw 0.2: int((0.1 + 0.9·0.99)·30/10) = 2 degrees, positive."""
    img = _as_uint8(torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(4))).float() / 255
    draws = Draws(torch.Generator().manual_seed(0))
    draws.values = [0.99, 0.2]
    ours = _as_uint8(_rotate(img, draws)).permute(1, 2, 0).numpy().astype(int)
    pil = Image.fromarray(_as_uint8(img).permute(1, 2, 0).numpy())
    theirs = np.asarray(pil.rotate(2, resample=Image.BILINEAR, fillcolor=(128, 128, 128))).astype(int)
    assert np.abs(ours - theirs).max() <= 1


def test_options_are_checked() -> None:
    with pytest.raises(MethodError, match="prior_strength"):
        get_method("memo")(demo_model("bn"), CIFAR, prior_strength=-3.0)
    with pytest.raises(MethodError, match="n_augmentations"):
        get_method("memo")(demo_model("bn"), CIFAR, n_augmentations=0)


def test_defaults_follow_the_authors() -> None:
    memo = get_method("memo")
    cifar, imagenet = memo.default_params(CIFAR), memo.default_params(MethodContext(num_classes=1000))
    assert (cifar["n_augmentations"], cifar["lr"], cifar["steps"]) == (32, 0.005, 1)
    assert (imagenet["n_augmentations"], imagenet["lr"], imagenet["prior_strength"]) == (64, 0.00025, 16.0)
    assert memo.all_params(CIFAR)["profile"] == "default"
