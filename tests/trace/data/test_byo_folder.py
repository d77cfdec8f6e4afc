"""Folder datasets: layouts and class indices as torchvision's ImageFolder numbers them, class
maps, on-the-fly corruptions, and traces (streams, resume, identity) on the user's images with
a timm model and a factory model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import tempora_schema as schema
from helpers.byo import write_image_folder, write_model_file
from tempora_trace.config import TraceConfig
from tempora_trace.data import get_dataset
from tempora_trace.errors import ConfigError, DataError
from tempora_trace.models.external import Preprocess
from tempora_trace.runner import trace_run


@pytest.fixture
def nested(tmp_path) -> Path:
    return write_image_folder(tmp_path / "photos")


@pytest.fixture
def flat(tmp_path) -> Path:
    return write_image_folder(tmp_path / "clean", domains=None, classes=("ant", "bee", "cat", "dog"))


def _labels_of(source) -> dict[str, int]:
    return {str(Path(f).relative_to(Path(f).parents[1])): int(y) for f, y in zip(source.files, source.labels)}


def test_class_indices_are_imagefolders_and_domains_are_folders(nested):
    from torchvision.datasets import ImageFolder

    spec = get_dataset(f"folder:{nested}")
    assert spec.domains == ("day", "night") and spec.num_classes == 3 and not spec.has_severity
    for domain in spec.domains:
        ours = _labels_of(spec.open(domain, None, None).source)
        theirs = ImageFolder(str(nested / domain))
        assert ours == {str(Path(p).relative_to(nested / domain)): y for p, y in theirs.samples}


def test_a_flat_folder_is_one_domain_named_after_it(flat):
    from torchvision.datasets import ImageFolder

    spec = get_dataset(f"folder:{flat}")
    assert spec.domains == ("clean",) and spec.num_classes == 4
    assert _labels_of(spec.open("clean", None, None).source) == {
        str(Path(p).relative_to(flat)): y for p, y in ImageFolder(str(flat)).samples
    }


def test_the_identity_name_follows_the_content_not_the_path(tmp_path):
    a = get_dataset(f"folder:{write_image_folder(tmp_path / 'one' / 'imgs')}")
    b = get_dataset(f"folder:{write_image_folder(tmp_path / 'two' / 'imgs')}")
    c = get_dataset(f"folder:{write_image_folder(tmp_path / 'three' / 'imgs', per_class=7)}")
    assert a.name == b.name and a.name.startswith("folder:imgs@") and c.name != a.name


def test_images_are_decoded_the_models_way(flat):
    from PIL import Image
    from torchvision import transforms as T

    pre = Preprocess(16, 18, "bicubic")
    source = get_dataset(f"folder:{flat}").bind(pre, 0).open("clean", None, None).source
    x, y = source.get_batch([0, 9])
    oracle = T.Compose([T.Resize(18, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(16), T.ToTensor()])
    for k, i in enumerate([0, 9]):
        assert torch.allclose(x[k], oracle(Image.open(source.files[i]).convert("RGB")), atol=1e-6)
    assert y.tolist() == [0, 1]  # 8 images per class, sorted by class folder


def test_class_map_maps_folders_onto_the_models_classes(flat, tmp_path):
    csv = tmp_path / "map.csv"
    csv.write_text("folder,index\nant,310\nbee,309\ncat,281\ndog,207\n")
    spec = get_dataset(f"folder:{flat}", class_map=csv)
    assert spec.class_mask == (207, 281, 309, 310) and spec.num_classes == 4 and spec.model_classes == 311
    domain = spec.open("clean", None, None)
    # labels are positions in the mask: ant -> 310 -> position 3, dog -> 207 -> position 0
    assert domain.class_mask == [207, 281, 309, 310]
    assert sorted(set(_labels_of(domain.source).items()))[0] == ("ant/000.png", 3)
    assert _labels_of(domain.source)["dog/000.png"] == 0
    csv.write_text("ant,1\nbee,2\n")
    with pytest.raises(DataError, match="does not map the class folder 'cat' \\(and 1 more\\)"):
        get_dataset(f"folder:{flat}", class_map=csv)
    with pytest.raises(ConfigError, match="--class-map is for --dataset folder:PATH"):
        get_dataset("demo", class_map=csv)


def test_corruptions_are_domains_deterministic_per_seed_and_leave_numpys_rng_alone(flat):
    from tempora_trace.data._corruptions_compat import corrupt
    from tempora_trace.data.streams import CORRUPTIONS

    spec = get_dataset(f"folder:{flat}", corruptions=["noise", "clean"])
    assert spec.domains == ("gaussian_noise", "shot_noise", "impulse_noise", "clean") and spec.has_severity
    pre = Preprocess(32, 32)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = spec.bind(pre, 7).open("gaussian_noise", 3, None).source.get_batch([2, 9])[0]
    assert np.array_equal(np.random.get_state()[1], before)
    again = spec.bind(pre, 7).open("gaussian_noise", 3, None).source.get_batch([2, 9])[0]
    other = spec.bind(pre, 8).open("gaussian_noise", 3, None).source.get_batch([2, 9])[0]
    clean_source = spec.bind(pre, 7).open("clean", 3, None).source
    assert torch.equal(a, again) and not torch.equal(a, other)
    # the oracle: the reference function on the resized image, numpy seeded from (seed, corruption, severity, index)
    clean = (clean_source.get_batch([2])[0][0].permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
    np.random.seed(int(np.random.SeedSequence([7, CORRUPTIONS.index("gaussian_noise"), 3, 2]).generate_state(1)[0]))
    expected = np.clip(np.asarray(corrupt(clean, "gaussian_noise", 3)), 0, 255).astype(np.uint8)
    assert torch.equal((a[0] * 255).round().to(torch.uint8), torch.from_numpy(expected).permute(2, 0, 1))
    with pytest.raises(ConfigError, match="unknown corruption 'rain'"):
        get_dataset(f"folder:{flat}", corruptions=["rain"])


def _cfg(tmp_path, dataset, model, **kw) -> TraceConfig:
    return TraceConfig(
        method=kw.pop("method", "tent"),
        dataset=dataset,
        model=model,
        weights=kw.pop("weights", "random"),
        batch_size=kw.pop("batch_size", 8),
        out=kw.pop("out", str(tmp_path / "out")),
        quiet=True,
        warmup_batches=1,
        **kw,
    )


def _rows(path):
    table = pq.read_table(path).drop(["e_ms", "l_ms", "delta_ms", "peak_mem_bytes"])
    return table.sort_by([(c, "ascending") for c in ("episode", "phase", "checkpoint", "step")]).to_pylist()


def test_timm_mobile_model_traces_a_folder_with_its_identity_in_the_metadata(nested, tmp_path, monkeypatch):
    import timm

    monkeypatch.chdir(tmp_path)  # the default output folder is relative
    path = trace_run(_cfg(tmp_path, f"folder:{nested}", "timm:mobilenetv3_small_100", input_size=32, out=None))
    meta = schema.decode_metadata(pq.read_table(path).schema, path)
    assert meta["model"] == "timm:mobilenetv3_small_100" and meta["weights"] == "random"
    assert meta["dataset"].startswith("folder:photos@") and meta["domains"] == ["day", "night"]
    assert meta["model_source"]["library_version"] == timm.__version__ and meta["model_source"]["norm"] == "bn"
    assert meta["model_source"]["preprocess"]["input_size"] == 32
    assert meta["dataset_source"]["path"] == str(nested)
    # default folder: traces/<dataset label>/<model label>/<device>, each one path part
    rel = Path(path).relative_to("traces")
    assert rel.parts[0] == meta["dataset"].replace(":", "-").replace("@", "-") and rel.parts[1] == "timm-mobilenetv3_small_100"
    assert meta["num_classes"] == 3


def test_timm_mobile_model_traces_the_demo_data(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPORA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "32")
    path = trace_run(_cfg(tmp_path, "demo", "timm:mobilenetv3_small_100", domains=["fog"], max_batches=2))
    meta = schema.decode_metadata(pq.read_table(path).schema, path)
    assert meta["model"] == "timm:mobilenetv3_small_100" and meta["model_source"]["num_classes"] == 10


def test_resume_on_a_folder_gives_the_rows_of_an_uninterrupted_run(nested, tmp_path):
    model = write_model_file(tmp_path / "m.py")
    whole = trace_run(_cfg(tmp_path, f"folder:{nested}", f"{model}:build", input_size=16, name="whole"))

    class Stop(Exception):
        pass

    def stop(index, name):
        raise Stop

    with pytest.raises(Stop):
        trace_run(_cfg(tmp_path, f"folder:{nested}", f"{model}:build", input_size=16, name="part"), on_episode_end=stop)
    part = trace_run(_cfg(tmp_path, f"folder:{nested}", f"{model}:build", input_size=16, name="part", resume=True))
    assert _rows(part) == _rows(whole)


@pytest.mark.parametrize("stream", ["continual", "dirichlet"])
def test_streams_on_a_corrupted_folder(flat, tmp_path, stream):
    model = write_model_file(tmp_path / "m.py")
    cfg = _cfg(
        tmp_path,
        f"folder:{flat}",
        f"{model}:build",
        input_size=32,
        corruptions=["gaussian_noise", "brightness"],
        severity=2,
        stream=stream,
        dirichlet_alpha=0.1 if stream == "dirichlet" else None,
        max_batches=3,
    )
    path = trace_run(cfg)
    table = pq.read_table(path)
    meta = schema.decode_metadata(table.schema, path)
    assert meta["domains"] == ["gaussian_noise", "brightness"] and meta["severity"] == 2
    adapt = [r for r in table.to_pylist() if r["phase"] == schema.PHASE_ADAPT]
    assert len(adapt) == 2 * 3 and {r["domain"] for r in adapt} == {"gaussian_noise", "brightness"}


def test_a_class_map_scores_over_the_mapped_classes(flat, tmp_path):
    model = write_model_file(tmp_path / "m.py")
    csv = tmp_path / "map.csv"
    csv.write_text("ant,5\nbee,2\ncat,7\ndog,0\n")
    path = trace_run(
        _cfg(tmp_path, f"folder:{flat}", f"{model}:build", method="standard", input_size=16, class_map=str(csv), max_batches=2)
    )
    meta = schema.decode_metadata(pq.read_table(path).schema, path)
    assert meta["num_classes"] == 4 and meta["model_source"]["num_classes"] == 8  # built for max index + 1
    assert meta["dataset_source"]["class_map"] == str(csv)


def test_no_decoding_or_corrupting_overlaps_a_timed_event(flat, tmp_path, monkeypatch):
    """Folder images are decoded, resized and corrupted by the staging threads between timed
    events only, for adapt and frozen rows alike (0.05 MiB: a chunk of one batch, so staging
    happens between events many times per episode)."""
    import threading
    import time

    from tempora_trace import runner as runner_mod
    from tempora_trace.data.folder import FolderSource

    loads, events, lock = [], [], threading.Lock()
    original_batch, original_event = FolderSource.get_batch, runner_mod.timed_event

    def get_batch(self, indices):
        t0 = time.perf_counter_ns()
        out = original_batch(self, indices)
        with lock:
            loads.append((t0, time.perf_counter_ns()))
        return out

    def timed_event(method, x, clock, adapt=True, **options):
        t0 = time.perf_counter_ns()
        ev = original_event(method, x, clock, adapt=adapt, **options)
        events.append((t0, time.perf_counter_ns(), adapt))
        return ev

    monkeypatch.setattr(FolderSource, "get_batch", get_batch)
    monkeypatch.setattr(runner_mod, "timed_event", timed_event)
    model = write_model_file(tmp_path / "m.py")
    cfg = _cfg(
        tmp_path,
        f"folder:{flat}",
        f"{model}:build",
        input_size=32,
        corruptions=["gaussian_noise", "fog"],
        workers=2,
        stage_mb=0.05,
        frozen_sample=2,
    )
    trace_run(cfg)
    assert len(loads) >= 8 and any(not adapt for *_, adapt in events)
    assert [(l0, l1, e0, e1) for l0, l1 in loads for e0, e1, _ in events if l0 < e1 and e0 < l1] == []
