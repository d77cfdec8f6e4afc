"""The one loader of user code: a method file (``PATH.py:CLASS``) and a model file
(``PATH.py:FACTORY``) go through it, one module per content: the same bytes are one module,
whoever asks, and an edited file, or an edited helper it imports, is imported afresh."""

from __future__ import annotations

import hashlib
import sys
import uuid

import pytest
import torch.nn as nn

from tempora_trace import user_code
from tempora_trace.methods import resolve_method
from tempora_trace.models import get_model

#: One file a user keeps a method and the model it adapts in; the helper gives the model's width.
BOTH = """
import torch
import torch.nn as nn

from tempora_trace.methods.tent import Tent
from {helper} import WIDTH

LOADS = globals().get("LOADS", 0) + 1


class MyTent(Tent):
    name = "{name}"


def build(num_classes=10):
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, WIDTH, 3), nn.BatchNorm2d(WIDTH), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(WIDTH, num_classes)
    )
"""


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    """A user's file holding a method and a model factory, and the helper module it imports."""
    tag = uuid.uuid4().hex[:8]
    helper = f"width_{tag}"
    (tmp_path / f"{helper}.py").write_text("WIDTH = 4\n")
    path = tmp_path / "mine.py"
    path.write_text(BOTH.format(helper=helper, name=f"my-tent-{tag}"))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield path, tmp_path / f"{helper}.py"
    for name in set(sys.modules) - before:
        if name.startswith(user_code.MODULE_PREFIX) or name == helper:
            del sys.modules[name]


def _model_module(path):
    net, spec = get_model(f"{path}:build", "random", num_classes=3, input_size=16)
    return net, spec


def test_a_method_file_and_a_model_file_are_one_module_per_content(user_file):
    path, helper = user_file
    method = resolve_method(f"{path}:MyTent")
    net, spec = _model_module(path)
    module = sys.modules[method.cls.__module__]
    # one cache key: the method's class and the model's factory come from one import of the file
    assert module.__name__.startswith(user_code.MODULE_PREFIX)
    assert module.LOADS == 1 and module.MyTent is method.cls
    assert user_code.load_file(path).module is module
    own = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    assert [n for n in sys.modules if n.startswith(user_code.MODULE_PREFIX) and n.endswith(own)] == [module.__name__]
    # one identity: the method's provenance and the model's source record the same digest, which
    # covers the helper (so it is not the file's bytes alone)
    assert method.source.sha256 == spec.source["file_sha256"] == user_code.load_file(path).sha256
    assert method.source.sha256 != user_code.file_sha256(path)
    assert isinstance(net, nn.Module) and spec.num_classes == 3

    # the file edited: a new module for both, and a new identity
    path.write_text(path.read_text() + "\nEDITED = True\n")
    edited = resolve_method(f"{path}:MyTent")
    _, edited_spec = _model_module(path)
    assert edited.cls is not method.cls and sys.modules[edited.cls.__module__].EDITED
    assert edited.cls.__module__ != module.__name__
    assert edited.source.sha256 == edited_spec.source["file_sha256"] != method.source.sha256


def test_an_edited_helper_imports_the_file_afresh_for_method_and_model(user_file):
    path, helper = user_file
    first = resolve_method(f"{path}:MyTent")
    helper.write_text("WIDTH = 6\n")
    net, spec = _model_module(path)  # the model asks first now: it sees the new helper
    again = resolve_method(f"{path}:MyTent")
    assert again.cls is not first.cls and again.cls.__module__ == first.cls.__module__  # same bytes, same name; a fresh import
    assert net[0].out_channels == 6
    assert again.source.sha256 == spec.source["file_sha256"] != first.source.sha256


def test_the_loader_refuses_in_one_exception_and_leaves_no_module(tmp_path):
    bad = tmp_path / "exits.py"
    bad.write_text("import sys\nsys.exit(3)\n")
    before = set(sys.modules)
    with pytest.raises(user_code.UserImportError) as failed:
        user_code.load_file(bad)
    assert isinstance(failed.value.cause, SystemExit)
    assert set(sys.modules) == before and not list(tmp_path.rglob("__pycache__"))
    with pytest.raises(FileNotFoundError):
        user_code.load_file(tmp_path / "missing.py")
    with pytest.raises(IsADirectoryError):
        user_code.load_file(tmp_path)


def test_the_users_file_sees_only_its_own_path_in_argv(tmp_path, monkeypatch):
    seen = tmp_path / "argv.py"
    seen.write_text("import sys\nARGV = list(sys.argv)\n")
    monkeypatch.setattr(sys, "argv", ["tempora-trace", "run", "--method", "x"])
    loaded = user_code.load_file(seen)
    try:
        assert loaded.module.ARGV == [str(seen.resolve())]
        assert sys.argv == ["tempora-trace", "run", "--method", "x"]
    finally:
        sys.modules.pop(loaded.module.__name__, None)
