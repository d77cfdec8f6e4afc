"""Models by spec: timm and torchvision by name, the user's own factory by module or file, the
short names; their preprocessing, normalisation kinds, identity and the methods that fit."""

from __future__ import annotations

import sys

import pytest
import torch

from helpers.byo import write_model_file
from tempora_trace.errors import ConfigError, UserCodeError, WeightsError
from tempora_trace.methods import available_methods, get_method
from tempora_trace.models import MODEL_NORMS, Normalized, get_model, model_label
from tempora_trace.models.external import SHORT_NAMES, parse_spec, state_identity


@pytest.fixture
def model_file(tmp_path):
    return write_model_file(tmp_path / "my_models.py")


# ------------------------------------------------------------------------ timm
def test_timm_model_random_weights_takes_the_dataset_classes_and_timms_preprocessing():
    import timm

    net, spec = get_model("timm:mobilenetv3_small_100", "random", num_classes=7, input_size=32)
    cfg = timm.models.get_pretrained_cfg("mobilenetv3_small_100")  # the default tag's config
    assert isinstance(net, Normalized)
    assert spec.name == "timm:mobilenetv3_small_100" and spec.num_classes == 7 and spec.input_size == 32
    assert spec.weights_identity == "random" and spec.norms == frozenset({"bn"}) and spec.norm_profile == "bn"
    assert spec.preprocess.mean == pytest.approx(cfg.mean) and spec.preprocess.std == pytest.approx(cfg.std)
    assert spec.preprocess.interpolation == cfg.interpolation
    assert spec.preprocess.resize == int(32 / cfg.crop_pct)  # timm: floor(size / crop_pct)
    assert spec.source["library"] == "timm" and spec.source["library_version"] == timm.__version__
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        mean, std = torch.tensor(cfg.mean).view(1, 3, 1, 1), torch.tensor(cfg.std).view(1, 3, 1, 1)
        assert torch.allclose(net(x), net.net((x - mean) / std), atol=1e-6)  # normalises internally
        assert net(x).shape == (2, 7)


def test_timm_pretrained_weights_load_from_the_hugging_face_cache(tmp_path, monkeypatch):
    """Offline, the pretrained file is what the HF cache holds; its hash is the identity."""
    import timm

    from tempora_schema import weights_identity
    from tempora_trace.models import pretrained

    reference = timm.create_model("mobilenetv3_small_100", pretrained=False)
    file = tmp_path / "model.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(file))
    asked = []
    monkeypatch.setattr(pretrained, "cached_hf_file", lambda repo, name: (asked.append((repo, name)), file)[1])
    net, spec = get_model("timm:mobilenetv3_small_100.lamb_in1k", offline=True)
    assert asked[0] == ("timm/mobilenetv3_small_100.lamb_in1k", "model.safetensors")
    assert spec.num_classes == 1000 and spec.weights_identity == weights_identity(file)
    assert spec.source["pretrained"] == "mobilenetv3_small_100.lamb_in1k"
    for k, v in reference.state_dict().items():
        assert torch.equal(net.net.state_dict()[k], v), k


def test_timm_hub_names_build_from_the_repos_config_and_weights_in_the_cache(tmp_path, monkeypatch):
    import json

    import timm
    from safetensors.torch import save_file

    from tempora_schema import weights_identity
    from tempora_trace.models import pretrained

    reference = timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=5)
    files = {"config.json": tmp_path / "config.json", "model.safetensors": tmp_path / "model.safetensors"}
    files["config.json"].write_text(
        json.dumps(
            {
                "architecture": "mobilenetv3_small_100",
                "num_classes": 5,
                "pretrained_cfg": {"input_size": [3, 160, 160], "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25], "crop_pct": 1.0},
            }
        )
    )
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(files["model.safetensors"]))
    monkeypatch.setattr(pretrained, "cached_hf_file", lambda repo, name: files.get(name) if repo == "me/my-net" else None)
    net, spec = get_model("timm:hf-hub:me/my-net", offline=True)
    assert spec.num_classes == 5 and spec.input_size == 160 and spec.preprocess.mean == (0.5, 0.5, 0.5)
    assert spec.weights_identity == weights_identity(files["model.safetensors"])
    assert all(torch.equal(net.net.state_dict()[k], v) for k, v in reference.state_dict().items())
    with pytest.raises(WeightsError, match="downloads are off: put config.json of the Hugging Face repo other/net"):
        get_model("timm:hf-hub:other/net", offline=True)


def test_timm_pretrained_weights_missing_offline_is_refused(monkeypatch):
    from tempora_trace.models import pretrained

    monkeypatch.setattr(pretrained, "cached_hf_file", lambda repo, name: None)
    with pytest.raises(WeightsError, match="downloads are off"):
        get_model("timm:mobilenetv3_small_100", offline=True)


def test_unknown_timm_name_offers_close_matches():
    with pytest.raises(ConfigError, match="unknown timm model 'mobilenetv3_smal_100'.*close matches: .*mobilenetv3_small_100"):
        get_model("timm:mobilenetv3_smal_100", "random")
    with pytest.raises(ConfigError, match="no pretrained weights 'resnet18.nosuch_tag'"):
        get_model("timm:resnet18.nosuch_tag")


# ------------------------------------------------------------------------ torchvision
def test_torchvision_preprocessing_follows_the_weights_enum():
    from torchvision.models import MobileNet_V2_Weights

    _, v2 = get_model("torchvision:mobilenet_v2", "random", num_classes=5)
    _, v1 = get_model("torchvision:mobilenet_v2:IMAGENET1K_V1", "random", num_classes=5)
    # DEFAULT is IMAGENET1K_V2 (resize 232, crop 224); IMAGENET1K_V1 resizes to 256 (torchvision docs)
    assert (v2.preprocess.resize, v2.preprocess.input_size) == (232, 224)
    assert (v1.preprocess.resize, v1.preprocess.input_size) == (256, 224)
    assert MobileNet_V2_Weights.DEFAULT is MobileNet_V2_Weights.IMAGENET1K_V2
    assert v2.preprocess.mean == pytest.approx((0.485, 0.456, 0.406)) and v2.num_classes == 5
    with pytest.raises(ConfigError, match="no weights 'IMAGENET9K'; available: DEFAULT, IMAGENET1K_V1, IMAGENET1K_V2"):
        get_model("torchvision:mobilenet_v2:IMAGENET9K", "random")
    with pytest.raises(ConfigError, match="close matches: mobilenet_v2"):
        get_model("torchvision:mobilenet_v22", "random")


def test_torchvision_pretrained_weights_load_from_torch_hubs_folder(tmp_path, monkeypatch):
    from torchvision.models import MobileNet_V3_Small_Weights, mobilenet_v3_small

    from tempora_schema import weights_identity
    from tempora_trace.models.pretrained import url_file

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    member = MobileNet_V3_Small_Weights.IMAGENET1K_V1
    reference = mobilenet_v3_small(num_classes=1000)
    path = url_file(member.url)
    path.parent.mkdir(parents=True)
    torch.save(reference.state_dict(), path)
    net, spec = get_model("mobilenet_v3_small", offline=True)  # the short name: the paper's model
    assert spec.name == "mobilenet_v3_small" and spec.num_classes == len(member.meta["categories"]) == 1000
    assert spec.weights_identity == weights_identity(path)
    assert spec.source["pretrained"] == "MobileNet_V3_Small_Weights.IMAGENET1K_V1"
    assert all(torch.equal(net.net.state_dict()[k], v) for k, v in reference.state_dict().items())
    path.unlink()
    with pytest.raises(WeightsError, match=f"downloads are off: put .*{path.name}"):
        get_model("torchvision:mobilenet_v3_small:IMAGENET1K_V1", offline=True)


@pytest.mark.parametrize("short", sorted(SHORT_NAMES))
def test_short_names_build_their_library_model_with_the_declared_normalisation(short):
    _, spec = get_model(short, "random", num_classes=10)
    assert spec.name == short and spec.norms == frozenset({MODEL_NORMS[short]}) and spec.num_classes == 10
    ref = parse_spec(SHORT_NAMES[short])
    assert spec.source["library"] == ref.kind


# ------------------------------------------------------------------------ the user's factory
def test_factory_from_a_file_gets_num_classes_and_is_identified_by_its_parameters(model_file):
    spec_text = f"{model_file}:build"
    net, spec = get_model(spec_text, num_classes=4, input_size=16)
    assert spec.name == "my_models.py:build" == model_label(spec_text)  # the file by name only
    assert spec.num_classes == 4 and spec.input_size == 16 and spec.preprocess.mean is None
    assert spec.weights_identity == state_identity(net) and spec.weights_identity.startswith("sha256:")
    _, again = get_model(spec_text, num_classes=4, input_size=16)
    assert again.weights_identity == spec.weights_identity  # same parameters, same identity
    import hashlib

    assert spec.source["file_sha256"] == hashlib.sha256(model_file.read_bytes()).hexdigest()


def test_factory_weights_file_and_random(model_file, tmp_path):
    from tempora_schema import weights_identity

    net, _ = get_model(f"{model_file}:build", num_classes=4)
    trained = {k: (v + 1 if v.is_floating_point() else v) for k, v in net.state_dict().items()}
    file = tmp_path / "mine.pt"
    torch.save(trained, file)
    loaded, spec = get_model(f"{model_file}:build", str(file), num_classes=4)
    assert spec.weights_identity == weights_identity(file)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in trained.items())
    _, rand = get_model(f"{model_file}:build", "random", num_classes=4)
    assert rand.weights_identity == "random"


def test_factory_without_num_classes_keeps_its_own_output(model_file):
    _, spec = get_model(f"{model_file}:build_three", num_classes=10, input_size=16)
    assert spec.num_classes == 3 and spec.norms == frozenset({"gn"})


def test_factory_by_module_name(model_file, monkeypatch):
    monkeypatch.syspath_prepend(str(model_file.parent))
    monkeypatch.delitem(sys.modules, "my_models", raising=False)
    _, spec = get_model("my_models:build", num_classes=2, input_size=16)
    assert spec.name == "my_models:build" and spec.source["module"] == "my_models"


def test_bad_factories_are_one_line_errors(model_file, tmp_path):
    with pytest.raises(ConfigError, match=r"has no 'buidl'; close matches: build"):
        get_model(f"{model_file}:buidl")
    with pytest.raises(ConfigError, match="returned a dict, not a torch.nn.Module"):
        get_model(f"{model_file}:not_a_model")
    with pytest.raises(ConfigError, match="'TABLE' is a int, not a callable"):
        get_model(f"{model_file}:TABLE")
    with pytest.raises(UserCodeError, match="the factory raised RuntimeError: the factory broke") as raised:
        get_model(f"{model_file}:raises")
    assert "Traceback" in raised.value.debug_detail
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\ndef build(:\n")
    with pytest.raises(UserCodeError, match=f"cannot import {broken}: SyntaxError"):
        get_model(f"{broken}:build")
    with pytest.raises(UserCodeError, match="cannot import module 'no_such_module_x': ModuleNotFoundError"):
        get_model("no_such_module_x:build")
    with pytest.raises(ConfigError, match="no such file"):
        get_model(f"{tmp_path}/absent.py:build")


# ------------------------------------------------------------------------ normalisation kinds
def test_normalisation_kinds_decide_which_methods_fit(model_file):
    from tempora_trace.cli import methods_for_model
    from tempora_trace.norms import describe_norms

    plain = methods_for_model(f"{model_file}:build_plain", 16)
    mixed = methods_for_model(f"{model_file}:build_mixed", 16)
    # no normalisation layers: only the methods that adapt none
    assert plain == [m for m in available_methods() if get_method(m).norm_free] and {"standard", "lame"} <= set(plain)
    # BatchNorm + LayerNorm: the norm-free methods and those that handle both families
    expected = [m for m in available_methods() if get_method(m).norm_free or {"bn", "ln"} <= get_method(m).compatible_norms]
    assert mixed == expected and "tent" in mixed and "adabn" not in mixed and "spa" not in mixed
    _, spec = get_model(f"{model_file}:build_mixed", input_size=16)
    assert spec.norm_profile == "mixed" and describe_norms(spec.norms) == "mixed normalisation (BatchNorm + LayerNorm)"
    # a built-in keeps its answer without being built
    assert methods_for_model("demo-resnet") == [m for m in available_methods() if "bn" in get_method(m).compatible_norms]


def test_list_model_shows_the_fitting_methods(model_file):
    from helpers.hostile import invoke
    from tempora_trace.cli import cli

    result = invoke(cli, ["list", "--model", "timm:mobilenetv3_small_100", "--input-size", "32"])
    assert result.exit_code == 0, result.output
    assert "BatchNorm" in result.output and "adabn" in result.output and "spa" not in result.output.split("methods:")[1]
    result = invoke(cli, ["list", "--model", f"{model_file}:build_plain", "--input-size", "16"])
    assert "no normalisation layers" in result.output and result.output.split("methods: ")[1].split() == ["lame,", "standard,", "t3a"]


def test_debug_prints_the_traceback_of_the_users_code_above_the_line(model_file):
    from helpers.hostile import invoke
    from tempora_trace.cli import cli

    args = ["list", "--model", f"{model_file}:raises"]
    plain = invoke(cli, args)
    assert plain.exit_code == 2 and plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr
    debug = invoke(cli, ["--debug", *args])
    assert debug.exit_code == 2 and "Traceback" in debug.stderr and 'raise RuntimeError("the factory broke")' in debug.stderr
    assert debug.stderr.splitlines()[-1] == plain.stderr.strip()
