"""The tracer writes the v2 identity and ``--resume`` refuses a run whose identity changed
(thread count, weights file), on tiny CIFAR-C-layout data."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch

import tempora_schema as schema
from helpers.cifar import tiny_config, tiny_net
from tempora_trace.config import TraceConfig
from tempora_trace.errors import ConfigError, OutputError
from tempora_trace.runner import trace_run


@pytest.fixture
def tiny_with_weights(monkeypatch):
    """``tiny-w``: a tiny BN net that loads ``--weights FILE`` (a state_dict) like the built-in models."""
    from tempora_trace import models

    def build(weights, num_classes):
        torch.manual_seed(0)
        net = tiny_net("bn", num_classes or 10)
        path = None
        if weights is not None and str(weights) != "random":
            path = str(weights)
            net.load_state_dict(torch.load(path, weights_only=True))
        return net, models.ModelSpec("tiny-w", "bn", num_classes or 10, 32, "cifar", path)

    monkeypatch.setitem(models.MODELS, "tiny-w", build)
    torch.manual_seed(1)
    return [tiny_net("bn", 10).state_dict() for _ in range(2)]  # two different weight sets


def _cfg(root, out, **kw):
    return tiny_config(root, out, **{"model": "tiny-w", "threads": 1, **kw})


def _weights(tmp_path, state, name):
    path = tmp_path / name
    torch.save(state, path)
    return path


def test_metadata_carries_the_identity(cifar_c_root, tmp_path, tiny_with_weights):
    w = _weights(tmp_path, tiny_with_weights[0], "a.pt")
    path = trace_run(_cfg(cifar_c_root, tmp_path / "out", weights=str(w), max_batches=3, severity=3))
    assert path.name == "tent-bs8-sev3.parquet"
    table = pq.read_table(path)
    meta = schema.decode_metadata(table.schema)
    schema.validate_table(table, meta, path)
    # plus the optional timing-variability measurement the tracer takes by default, the heap's
    # policy and the page faults of the events (where the OS counts them)
    extra = {schema.VARIABILITY_KEY, schema.HEAP_KEY} | ({schema.HEAP_FAULTS_KEY} if schema.HEAP_FAULTS_KEY in meta else set())
    assert meta["schema_version"] == 2 and set(meta) == set(schema.METADATA_FIELDS) | extra
    assert extra <= set(schema.OPTIONAL_METADATA_FIELDS) and meta[schema.HEAP_KEY] in ("steady", "system")
    assert meta["weights"] == schema.weights_identity(w) and meta["threads"] == 1
    assert meta["severity"] == 3 and meta["domains"] == ["gaussian_noise", "fog"] and meta["max_batches"] == 3
    assert meta["speed_probe_kind"] == "none" or meta["speed_probe"]
    ident = schema.TraceIdentity.from_metadata(meta)
    assert ident.file_stem() + ".parquet" == path.name


def test_resume_refuses_changed_threads_or_weights(cifar_c_root, tmp_path, tiny_with_weights):
    w1 = _weights(tmp_path, tiny_with_weights[0], "a.pt")
    w2 = _weights(tmp_path, tiny_with_weights[1], "b.pt")
    copy = tmp_path / "copy-of-a.pt"
    copy.write_bytes(w1.read_bytes())

    class Killed(Exception):
        pass

    def kill(index, name):
        raise Killed

    with pytest.raises(Killed):
        trace_run(_cfg(cifar_c_root, tmp_path / "run", weights=str(w1)), on_episode_end=kill)
    with pytest.raises(OutputError, match=r"options differ.*threads"):
        trace_run(_cfg(cifar_c_root, tmp_path / "run", weights=str(w1), threads=2, resume=True))
    with pytest.raises(OutputError, match=r"options differ.*weights"):
        trace_run(_cfg(cifar_c_root, tmp_path / "run", weights=str(w2), resume=True))
    with pytest.raises(OutputError, match=r"options differ.*weights"):
        trace_run(_cfg(cifar_c_root, tmp_path / "run", weights="random", resume=True))
    # the same weights under another file name are the same identity
    path = trace_run(_cfg(cifar_c_root, tmp_path / "run", weights=str(copy), resume=True))
    assert schema.decode_metadata(pq.read_schema(path))["weights"] == schema.weights_identity(w1)


def test_threads_default_is_recorded_and_checked():
    cfg = TraceConfig(method="tent").resolved()
    assert cfg.threads == torch.get_num_threads()
    with pytest.raises(ConfigError, match="--threads"):
        TraceConfig(method="tent", threads=0).resolved()
