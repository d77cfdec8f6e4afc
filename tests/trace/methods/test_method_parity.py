"""The ``paper`` profile reproduces the Tempora reference code on each point where the default
departs from it, and the default does what the method's docstring says.

Oracles are hand-worked from the formulas (BatchNorm's momentum update, SGD's momentum step,
the SHOT-IM loss), parameter counts of the reference's rules on the real architectures
(random weights), and invariants (the Kalman step's adapted values do not depend on how many
frozen parameters the hidden model also blends)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torchvision.transforms.functional as TF
from torchvision.transforms import InterpolationMode

from helpers.methods import source_images, tiny_model
from tempora_trace.methods import MethodContext, MethodError, available_methods, get_method
from tempora_trace.methods.augment import PatchNoise, _resized_crop_box, random_resized_crop_flip
from tempora_trace.methods.base import BN_TYPES, PROFILES
from tempora_trace.methods.shot_im import information_maximisation_loss

CTX = {
    n: MethodContext(num_classes=10, dataset_family="cifar", batch_size=8, norm_kind=n, source_images=source_images)
    for n in ("bn", "gn", "ln")
}


def build(name, norm="bn", model=None, **params):
    return get_method(name)(model if model is not None else tiny_model(norm), CTX[norm], **params)


def batch(seed=1, n=8, size=8):
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def first_bn(model):
    return next(m for m in model.modules() if isinstance(m, BN_TYPES))


# ------------------------------------------------------------------ the option itself
@pytest.mark.parametrize("name", available_methods())
def test_every_method_accepts_both_profiles_and_records_it(name):
    cls = get_method(name)
    norm = next(n for n in ("bn", "gn", "ln") if n in cls.compatible_norms)
    if name == "deyo" and norm == "ln":
        norm = "gn"
    for profile in PROFILES:
        params = {"image_size": 8, "noise_patch": 4} if name == "spa" else {}
        method = build(name, norm, profile=profile, **params)
        assert method.hparams()["profile"] == profile
        assert method.paper_profile is (profile == "paper")
    with pytest.raises(MethodError, match="profile must be one of default, paper"):
        build(name, norm, profile="reference")


@pytest.mark.parametrize("name", available_methods())
def test_docstring_lists_every_departure(name):
    cls = get_method(name)
    for d in cls.departures:
        assert d.point in (cls.__doc__ or "")


def test_committed_parity_page_is_the_generated_one():
    from pathlib import Path

    from tempora_trace.methods._parity import splice

    page = (Path(__file__).resolve().parents[3] / "docs" / "results" / "methods-parity.md").read_text(encoding="utf-8")
    assert splice(page) == page, "regenerate: python -m tempora_trace.methods._parity --write docs/results/methods-parity.md"


# ------------------------------------------------------------------ SHOT-IM
@pytest.fixture(scope="module")
def vit():
    """timm's ViT-B/16 with random weights, built once for the module (about 2 s)."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    return timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=1000)


def _resnet50():
    import torchvision.models as tvm

    torch.manual_seed(0)
    return tvm.resnet50(weights=None)


def test_shot_im_on_vit_b16_paper_freezes_the_mlps_default_only_the_head(vit):
    ctx = MethodContext(num_classes=1000, norm_kind="ln", model_name="vit_base_patch16_224")
    default = get_method("shot-im")(vit, ctx)
    assert len(default.adapted) == 150
    assert round(sum(p.numel() for _, p in default.adapted) / 1e6, 1) == 85.8
    assert not any(n.startswith("head.") for n, _ in default.adapted)
    del default
    paper = get_method("shot-im")(vit, ctx, profile="paper")
    names = [n for n, _ in paper.adapted]
    assert len(names) == 102 and round(sum(p.numel() for _, p in paper.adapted) / 1e6, 1) == 29.1
    assert not any(".mlp.fc" in n or n.startswith("head.") for n in names)
    assert sum(p.requires_grad for p in vit.parameters()) == 102


def test_shot_im_on_resnet50_both_rules_freeze_only_fc():
    net = _resnet50()
    ctx = MethodContext(num_classes=1000, norm_kind="bn", model_name="resnet50")
    counts = {}
    for profile in PROFILES:
        method = get_method("shot-im")(net, ctx, profile=profile)
        counts[profile] = [n for n, _ in method.adapted]
        assert all(not n.startswith("fc.") for n in counts[profile])
    assert counts["default"] == counts["paper"] and len(counts["paper"]) == 159


def test_shot_im_epsilon_is_float32_eps_in_the_paper_profile():
    logits = torch.randn(8, 10) * 4
    logits[:, 3] += 50  # one class dominates: the marginal has entries near 0, where ε matters
    for profile, eps in (("default", 1e-5), ("paper", 1.1920928955078125e-07)):
        method = build("shot-im", profile=profile)
        p = logits.softmax(1)
        marginal = p.mean(0)
        expected = -(p * p.log()).sum(1).mean() + (marginal * torch.log(marginal + eps)).sum()
        torch.testing.assert_close(method.loss(batch(), logits), expected)
    assert not torch.equal(
        information_maximisation_loss(logits, 1e-5), information_maximisation_loss(logits, torch.finfo(torch.float32).eps)
    )


def test_sar_top_layer_rules_agree_on_the_paper_architectures_not_on_the_demo(vit):
    from tempora_trace.models.demo import build_demo_resnet

    vit_ctx = MethodContext(num_classes=1000, norm_kind="ln", model_name="vit_base_patch16_224")
    r50_ctx = MethodContext(num_classes=1000, norm_kind="bn", model_name="resnet50")
    for model, ctx, excluded in ((vit, vit_ctx, ["blocks.9", "blocks.10", "blocks.11", "norm"]), (_resnet50(), r50_ctx, ["layer4"])):
        sets = {p: [n for n, _ in get_method("sar")(model, ctx, profile=p).adapted] for p in PROFILES}
        assert sets["default"] == sets["paper"]
        assert get_method("sar")(model, ctx, profile="paper").excluded == excluded
    demo = {p: get_method("sar")(build_demo_resnet("bn", 10), CTX["bn"], profile=p) for p in PROFILES}
    assert demo["default"].excluded == ["layers.2"] and demo["paper"].excluded == []
    assert len(demo["paper"].adapted) > len(demo["default"].adapted)


# ------------------------------------------------------------------ BN buffers and auxiliary forwards
def _bn_inputs(method, x):
    """Predict and adapt one batch, capturing every input the first BN layer saw."""
    seen = []
    handle = first_bn(method.model).register_forward_pre_hook(lambda m, a: seen.append(a[0].detach().clone()))
    try:
        method.predict(x)
        method.adapt()
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("name, params", [("sar", {}), ("deyo", {"plpd_threshold": -1.0}), ("cmf", {})])
def test_auxiliary_forward_moves_bn_buffers_only_in_the_paper_profile(name, params):
    big = {"e_margin": 100.0} if name == "sar" else {"ent_threshold": 100.0} if name == "deyo" else {}
    for profile in PROFILES:
        method = build(name, profile=profile, **params, **big)
        bn = first_bn(method.model)
        seen = _bn_inputs(method, batch())
        assert len(seen) == 2, "one clean and one auxiliary forward"
        mu_clean, mu_aux = (s.mean((0, 2, 3)) for s in seen)
        after_clean = 0.1 * mu_clean  # source statistics discarded: the buffer started at 0
        if profile == "default":
            torch.testing.assert_close(bn.running_mean, after_clean)
            assert int(bn.num_batches_tracked) == 1
        else:
            torch.testing.assert_close(bn.running_mean, 0.9 * after_clean + 0.1 * mu_aux)
            assert int(bn.num_batches_tracked) == 2


# ------------------------------------------------------------------ SAR
def test_sar_empty_filter_default_skips_paper_takes_a_momentum_only_step():
    for profile in PROFILES:
        method = build("sar", profile=profile, e_margin=100.0)
        method.predict(batch(1))
        method.adapt()  # a real step: momentum buffers exist now
        sgd = method.optimizer.base
        before = {id(p): p.detach().clone() for g in sgd.param_groups for p in g["params"]}
        buffers = {id(p): sgd.state[p]["momentum_buffer"].clone() for g in sgd.param_groups for p in g["params"]}
        nbt = int(first_bn(method.model).num_batches_tracked)
        method.params["e_margin"] = 0.0  # nothing is reliable
        method.predict(batch(2))
        method.adapt()
        lr, mom = method.params["lr"], method.params["momentum"]
        for g in sgd.param_groups:
            for p in g["params"]:
                if profile == "default":
                    assert torch.equal(p, before[id(p)])
                    assert torch.equal(sgd.state[p]["momentum_buffer"], buffers[id(p)])
                else:  # zero gradient: buf ← μ·buf, p ← p − lr·buf
                    expected_buf = mom * buffers[id(p)]
                    torch.testing.assert_close(sgd.state[p]["momentum_buffer"], expected_buf)
                    torch.testing.assert_close(p.detach(), before[id(p)] - lr * expected_buf)
        assert method.last_updated is (profile == "paper")
        assert int(first_bn(method.model).num_batches_tracked) == nbt + (1 if profile == "default" else 2)
        assert method.loss_average is not None and not math.isnan(method.loss_average)


def test_sar_reset_keeps_sgd_momentum_only_in_the_paper_profile():
    for profile in PROFILES:
        source = tiny_model("bn")
        method = build("sar", model=copy.deepcopy(source), profile=profile, e_margin=100.0)
        method.predict(batch())
        method.adapt()
        sgd = method.optimizer.base
        buffers = [sgd.state[p]["momentum_buffer"].clone() for p in sgd.param_groups[0]["params"]]
        method.reset()
        for name, p in method.adapted:
            assert torch.equal(p.detach(), dict(source.named_parameters())[name].detach())
        if profile == "default":
            assert len(sgd.state) == 0
        else:
            for p, buf in zip(sgd.param_groups[0]["params"], buffers):
                assert torch.equal(sgd.state[p]["momentum_buffer"], buf)


# ------------------------------------------------------------------ CMF
def test_resized_crop_boxes_follow_the_reference_ranges():
    gen = torch.Generator().manual_seed(0)
    fractions = []
    for _ in range(400):
        top, left, h, w = _resized_crop_box(32, 32, gen, (0.5, 1.0), (3 / 4, 4 / 3))
        assert 0 <= top <= 32 - h and 0 <= left <= 32 - w
        fractions.append(h * w / 1024)
        assert 3 / 4 - 0.15 <= w / h <= 4 / 3 + 0.15  # rounding to whole pixels
    assert 0.45 <= min(fractions) < 0.6 and max(fractions) > 0.9


def test_cmf_paper_view_is_a_resized_crop_and_flip_drawn_per_image():
    x = batch(n=6, size=16)
    gen = torch.Generator().manual_seed(3)
    replay = torch.Generator().manual_seed(3)
    out = random_resized_crop_flip(x, gen)
    assert out.shape == x.shape
    for img, got in zip(x, out):  # oracle: the same draws, one torchvision crop per image
        top, left, h, w = _resized_crop_box(16, 16, replay, (0.5, 1.0), (3 / 4, 4 / 3))
        want = TF.resized_crop(img, top, left, h, w, [16, 16], interpolation=InterpolationMode.BILINEAR, antialias=True)
        if torch.rand((), generator=replay).item() < 0.5:
            want = TF.hflip(want)
        assert torch.equal(got, want)
    same = x[:1].repeat(6, 1, 1, 1)
    paper = build("cmf", profile="paper")
    default = build("cmf")
    views_paper, views_default = paper._view(same), default._view(same)
    assert not all(torch.equal(views_paper[0], v) for v in views_paper[1:])  # per image
    assert all(torch.equal(views_default[0], v) for v in views_default[1:])  # one draw per batch


def test_cmf_paper_kalman_blends_every_parameter_with_the_same_adapted_result():
    source = tiny_model("bn")
    methods = {p: build("cmf", model=copy.deepcopy(source), profile=p) for p in PROFILES}
    n_all = len(list(source.parameters()))
    assert len(methods["paper"].hidden) == n_all and len(methods["default"].hidden) == len(methods["default"].trainable)
    torch.manual_seed(5)
    shift = [torch.randn_like(p) for p in methods["default"].trainable]
    for m in methods.values():  # the same SGD-adapted values in both
        with torch.no_grad():
            for p, s in zip(m.trainable, shift):
                p.add_(s)
        for _ in range(3):
            m._filter()
    for a, b in zip(methods["default"].trainable, methods["paper"].trainable):
        assert torch.equal(a, b)
    frozen_slots = [i for i in range(n_all) if i not in methods["paper"]._adapted_slots]
    assert frozen_slots, "the tiny model has a frozen conv and head"


def test_cmf_loss_denominator_configured_vs_current_batch_size():
    source, x = tiny_model("bn"), batch(n=5)  # a partial batch: the context says 8
    losses = {}
    for profile in PROFILES:
        method = build("cmf", model=copy.deepcopy(source), profile=profile)
        method._view = lambda v: v  # the same (identity) view in both, to isolate the denominator
        method._step = lambda loss, p=profile: losses.setdefault(p, loss.detach())
        method.predict(x)
        method.adapt()
    torch.testing.assert_close(losses["default"] * 8.0, losses["paper"] * 5.0)


# ------------------------------------------------------------------ SPA and ZeroSIAM
def test_spa_per_patch_loop_matches_its_formula_and_carries_gradients():
    noise = PatchNoise(8, 4, 0.1)
    with torch.no_grad():
        noise.alpha.copy_(torch.tensor([0.1, 0.5, 0.9, 0.3]))
    x = batch(n=2)
    gen, replay = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    out = noise.forward_per_patch(x, gen)
    z = x * 2 - 1
    want = torch.empty_like(z)
    for k in range(4):
        t, l = (k // 2) * 4, (k % 2) * 4
        eps = torch.randn(3, 4, 4, generator=replay)
        r = noise.alpha[k].detach() ** 2
        want[..., t : t + 4, l : l + 4] = (1 - r) * z[..., t : t + 4, l : l + 4] + r * eps
    torch.testing.assert_close(out.detach(), (want.clamp(-1, 1) + 1) / 2)
    out.sum().backward()
    assert noise.alpha.grad is not None and bool((noise.alpha.grad != 0).all())


@pytest.mark.parametrize("name", ["spa", "zerosiam"])
def test_clean_forward_records_autograd_only_in_the_paper_profile(name):
    params = {"image_size": 8, "noise_patch": 4} if name == "spa" else {}
    source = tiny_model("gn")
    preds = {}
    for profile in PROFILES:
        method = build(name, "gn", model=copy.deepcopy(source), profile=profile, **params)
        preds[profile] = method.predict(batch())
        assert method._pending[1].requires_grad is (profile == "paper")
        method.adapt()
        assert method._pending is None
    assert torch.equal(preds["default"], preds["paper"])


# ------------------------------------------------------------------ NEO and LAME
def test_neo_frozen_paper_is_the_uncentred_source_model():
    source = tiny_model("bn")
    for profile in PROFILES:
        method = build("neo", model=copy.deepcopy(source), profile=profile)
        method.predict(batch(1))
        method.freeze()
        frozen = method.predict(batch(2))
        with torch.no_grad():
            plain = source(batch(2))
        assert torch.equal(frozen, plain) is (profile == "paper")


def test_lame_paper_unary_is_log_softmax():
    source = tiny_model("bn")
    x = batch()
    out = {p: build("lame", model=copy.deepcopy(source), profile=p, max_steps=1).predict(x) for p in PROFILES}
    torch.testing.assert_close(out["default"], out["paper"], atol=1e-5, rtol=0)  # the same neighbours, nearly the same unary
    logits = source(x).detach()
    unary_paper = -logits.log_softmax(1)
    unary_default = -torch.log(logits.softmax(1) + 1e-10)
    assert not torch.equal(unary_paper, unary_default)


def test_paper_profile_trace_sits_beside_the_default_one(tmp_path, monkeypatch):
    """`--profile paper` names the trace <method>-paper and the simulator keeps it apart."""
    from tempora_sim.sweeps.replay import run_sweep
    from tempora_trace.cli import main

    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "128")
    common = [
        "--dataset",
        "demo",
        "--domains",
        "fog",
        "--batch-size",
        "32",
        "--max-batches",
        "2",
        "--no-default-checkpoints",
        "--threads",
        "1",
        "--out",
        str(tmp_path),
        "--quiet",
    ]
    assert main(["run", "--method", "standard", *common]) == 0
    assert main(["run", "--method", "tent", *common]) == 0
    assert main(["run", "--method", "tent", "--profile", "paper", *common]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == ["standard-bs32.parquet", "tent-bs32.parquet", "tent-paper-bs32.parquet"]
    frame = run_sweep(tmp_path, protocols="offline").frame
    assert set(frame["method"].unique()) == {"standard", "tent", "tent-paper"}
    assert main(["run", "--method", "tent", "--profile", "paper", "--param", "profile=default", *common]) == 2
