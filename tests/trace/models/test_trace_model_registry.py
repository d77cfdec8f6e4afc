"""The static model → normalisation table must agree with the networks it describes:
refusals name compatible models from it before any model is built."""

import torch

from tempora_trace.methods import available_methods, get_method
from tempora_trace.methods.base import norm_kind
from tempora_trace.methods.gradient import incompatibility_message
from tempora_trace.models import MODEL_NORMS, MODELS, compatible_models, get_model


def test_every_builtin_model_has_its_norm_listed_and_it_matches_the_network():
    torch.set_num_threads(1)
    assert set(MODEL_NORMS) <= set(MODELS)
    builtin = {"demo-resnet", "demo-resnet-gn", "resnet18", "resnet50", "cifar-resnet18", "vit_base_patch16_224"}
    assert builtin <= set(MODEL_NORMS)
    for name in sorted(builtin):
        net, spec = get_model(name, "random" if not name.startswith("demo") else None)
        assert norm_kind(net) == MODEL_NORMS[name] == spec.norm, name


def test_every_method_runs_on_at_least_one_demo_model():
    for name in available_methods():
        fits = compatible_models(get_method(name).compatible_norms)
        assert {"demo-resnet", "demo-resnet-gn"} & set(fits), name


def test_refusal_names_the_compatible_models():
    msg = incompatibility_message(get_method("spa"), "model 'demo-resnet' uses BatchNorm")
    assert msg == (
        "method 'spa' needs GroupNorm or LayerNorm layers but model 'demo-resnet' uses BatchNorm; "
        "compatible built-in models: demo-resnet-gn, vit_base_patch16_224, resnet50_gn"
    )


def test_methods_for_prints_the_methods_that_fit_a_model(capsys):
    from tempora_trace.cli import main

    assert main(["--methods-for", "demo-resnet-gn"]) == 0
    listed = capsys.readouterr().out.split()
    assert "spa" in listed and "zerosiam" in listed and "adabn" not in listed
    assert main(["--methods-for", "no-such-model"]) == 2
    assert "unknown model 'no-such-model'" in capsys.readouterr().err
