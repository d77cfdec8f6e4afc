"""The mixed, gradual and repeated streams (docs/guide/tracer.md, "Mixed, gradual and long streams"; docs/design/design.md §1):
their batch plans against plain-Python references, their determinism per seed, their identity,
and traces of each on tiny data, a folder and the demo set, swept by the simulator."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest

import tempora_schema as schema
from helpers.byo import write_image_folder, write_model_file
from helpers.cifar import tiny_config
from tempora_trace.config import TraceConfig
from tempora_trace.data.cifar import ArraySource
from tempora_trace.data.streams import Domain, MixedSource, batch_order, plan_stream
from tempora_trace.errors import ConfigError, OutputError
from tempora_trace.runner import trace_run

#: three domains of unequal size (multiples of the batch size, so every sample is played)
SIZES = {"gaussian_noise": 48, "fog": 32, "snow": 16}
BS = 8


def _images(name: str, severity: int | None, n: int) -> np.ndarray:
    """Images whose first pixel names their domain, severity and index (an oracle for the batches)."""
    out = np.zeros((n, 2, 2, 3), dtype=np.uint8)
    out[:, 0, 0, 0] = list(SIZES).index(name) if name in SIZES else 9
    out[:, 0, 0, 1] = severity or 0
    out[:, 0, 0, 2] = np.arange(n)
    return out


class Opener:
    """``open_domain`` over in-memory domains; records what the plan opened."""

    def __init__(self, sizes=SIZES):
        self.sizes = sizes
        self.opened: list[tuple[str, int | None]] = []

    def __call__(self, name: str, severity: int | None) -> Domain:
        self.opened.append((name, severity))
        n = self.sizes[name]
        return Domain(name, severity, ArraySource(_images(name, severity, n), np.arange(n) % 4))


def _plan(stream, names=tuple(SIZES), severity=5, seed=1, max_batches=None, opener=None):
    return plan_stream(stream, list(names), opener or Opener(), severity, BS, seed, max_batches)


def _steps(episode):
    """(domain, severity, sample indices) of every batch in step order."""
    return [(d.name, d.severity, idx) for d, idx in (episode.locate(s) for s in range(episode.num_batches))]


def _batch_bytes(episodes) -> list[bytes]:
    out = []
    for ep in episodes:
        for step in range(ep.num_batches):
            domain, idx = ep.locate(step)
            x, y = domain.source.get_batch(idx)
            out.append(x.numpy().tobytes() + y.numpy().tobytes())
    return out


# ---------------------------------------------------------------------- names
def test_stream_names_and_rounds():
    assert schema.gradual_severities(5) == [1, 2, 3, 4, 5, 4, 3, 2, 1]
    assert schema.gradual_severities(2) == [1, 2, 1]
    for good in ("episodic", "continual", "gradual", "mixed", "dirichlet:0.1", "continual:x2", "mixed:x10", "gradual:x3"):
        assert schema.is_stream(good), good
    for bad in ("continual:x1", "continual:x0", "mixed:x02", "episodic:x2", "dirichlet:0.1:x2", "wild", "gradual:x", ""):
        assert not schema.is_stream(bad), bad
    assert schema.stream_rounds("continual:x12") == 12 and schema.stream_base("continual:x12") == "continual"
    assert schema.stream_rounds("mixed") == 1 and schema.stream_name("gradual", 3) == "gradual:x3"
    assert schema.stream_name("mixed", 1) == "mixed"
    assert [schema.resets_per_episode(s) for s in ("episodic", "dirichlet:1", "continual", "gradual:x2", "mixed")] == [
        True,
        True,
        False,
        False,
        False,
    ]


# ---------------------------------------------------------------------- mixed
def test_mixed_is_one_episode_of_the_shuffled_union():
    (ep,) = _plan("mixed")
    assert ep.name == "mixed" and ep.num_batches == sum(SIZES.values()) // BS
    source = ep.domains[0].source
    assert isinstance(source, MixedSource) and ep.domains[0].name == schema.MIXED_DOMAIN and ep.domains[0].severity == 5
    # the order is the seeded shuffle of the union, cut into batches
    expected = batch_order(sum(SIZES.values()), BS, 1, "mixed")
    assert all(np.array_equal(a, b) for a, b in zip(ep.batches[0], expected))
    # every sample of every domain exactly once (the sizes are multiples of the batch size)
    flat = np.concatenate(ep.batches[0])
    assert sorted(flat.tolist()) == list(range(sum(SIZES.values())))
    counts = Counter(source.domain_of(flat).tolist())
    assert [counts[k] for k in range(len(SIZES))] == list(SIZES.values())
    # batches mix the domains: most hold more than one, and the stream is not in domain blocks
    per_batch = [len(set(source.domain_of(b).tolist())) for b in ep.batches[0]]
    assert sum(k > 1 for k in per_batch) >= len(per_batch) - 1 and max(per_batch) == len(SIZES)


def test_mixed_batches_are_the_domains_own_samples():
    """A mixed batch's images and labels are those of the samples its indices name, in order
    (reference: the domains' arrays concatenated)."""
    (ep,) = _plan("mixed")
    images = np.concatenate([_images(n, 5, k) for n, k in SIZES.items()])
    labels = np.concatenate([np.arange(k) % 4 for k in SIZES.values()])
    for step in (0, 3, ep.num_batches - 1):
        domain, idx = ep.locate(step)
        x, y = domain.source.get_batch(idx)
        assert np.array_equal((x.numpy() * 255).round().astype(np.uint8).transpose(0, 2, 3, 1), images[idx])
        assert y.tolist() == labels[idx].tolist()


def test_mixed_max_batches_caps_at_what_a_continual_stream_holds():
    (ep,) = _plan("mixed", max_batches=2)
    assert ep.num_batches == 2 * len(SIZES)
    (full,) = _plan("mixed")
    assert all(np.array_equal(a, b) for a, b in zip(ep.batches[0], full.batches[0]))


# ---------------------------------------------------------------------- gradual
def test_gradual_ramps_each_domain_one_to_peak_and_back():
    opener = Opener()
    (ep,) = _plan("gradual", severity=4, opener=opener)
    ramp = [1, 2, 3, 4, 3, 2, 1]
    assert opener.opened == [(n, s) for n in SIZES for s in ramp]
    assert ep.name == "gradual" and [(d.name, d.severity) for d in ep.domains] == opener.opened
    steps = _steps(ep)
    # each segment is a full pass of its domain at that severity, in the ramp's order
    expected = [(n, s) for n in SIZES for s in ramp for _ in range(SIZES[n] // BS)]
    assert [(n, s) for n, s, _ in steps] == expected
    counts = Counter((n, s) for n, s, _ in steps)
    for n, size in SIZES.items():
        for s in range(1, 5):
            assert counts[(n, s)] == (size // BS) * ramp.count(s)
    # the batches hold the samples of their own domain and severity (the images say so)
    for step in (0, len(steps) // 2, len(steps) - 1):
        domain, idx = ep.locate(step)
        x, _ = domain.source.get_batch(idx)
        first = (x[:, :, 0, 0].numpy() * 255).round().astype(int)
        assert set(first[:, 0]) == {list(SIZES).index(domain.name)} and set(first[:, 1]) == {domain.severity}


def test_gradual_max_batches_caps_each_segment():
    (ep,) = _plan("gradual", max_batches=1)
    assert ep.num_batches == len(SIZES) * 9 and all(len(b) == 1 for b in ep.batches)


def test_gradual_needs_severities():
    with pytest.raises(ConfigError, match="gradual"):
        _plan("gradual", severity=None)


# ---------------------------------------------------------------------- rounds
@pytest.mark.parametrize("base", ["continual", "gradual", "mixed"])
def test_rounds_repeat_the_sequence_first_round_as_the_one_round_stream(base):
    (one,) = _plan(base)
    (three,) = _plan(f"{base}:x3")
    n = one.num_batches
    assert three.num_batches == 3 * n and three.name == one.name
    first, second, third = (_steps(three)[k * n : (k + 1) * n] for k in range(3))
    assert all(a[:2] == b[:2] and np.array_equal(a[2], b[2]) for a, b in zip(_steps(one), first))
    # later rounds visit the same domains and severities in the same order, each shuffled afresh
    assert [s[:2] for s in second] == [s[:2] for s in first] == [s[:2] for s in third]
    assert not all(np.array_equal(a[2], b[2]) for a, b in zip(first, second))
    if base == "mixed":  # each round plays the whole union once
        for part in (first, second, third):
            assert sorted(np.concatenate([s[2] for s in part]).tolist()) == list(range(sum(SIZES.values())))


def test_episodic_and_continual_plans_are_unchanged():
    """The one-round streams order every domain by ``(seed, domain)`` as they always did."""
    eps = _plan("episodic")
    assert [e.name for e in eps] == list(SIZES)
    for e in eps:
        assert all(np.array_equal(a, b) for a, b in zip(e.batches[0], batch_order(SIZES[e.name], BS, 1, e.name)))
    (cont,) = _plan("continual")
    assert all(np.array_equal(a, b) for e, orders in zip(eps, cont.batches) for a, b in zip(e.batches[0], orders))


# ---------------------------------------------------------------------- determinism
@pytest.mark.parametrize("stream", ["mixed", "gradual", "continual:x2", "mixed:x2"])
def test_same_seed_same_batches_byte_for_byte_other_seed_differs(stream):
    a, b = _batch_bytes(_plan(stream, seed=7)), _batch_bytes(_plan(stream, seed=7))
    assert a == b
    assert _batch_bytes(_plan(stream, seed=8)) != a


# ---------------------------------------------------------------------- config and identity
def test_rounds_resolve_into_the_stream_name_and_the_file_stem():
    cfg = TraceConfig(method="tent", stream="continual", rounds=3).resolved()
    assert cfg.stream == "continual:x3" and cfg.rounds == 3 and cfg.file_stem() == "tent-continualx3"
    assert TraceConfig(method="tent", stream="continual:x3").resolved().rounds == 3  # a campaign's or API's spelling
    assert cfg.resolved().stream == "continual:x3"  # resolving twice changes nothing
    assert TraceConfig(method="tent", stream="gradual", severity=3).resolved().file_stem() == "tent-sev3-gradual"
    assert TraceConfig(method="tent", stream="mixed", rounds=1).resolved().stream == "mixed"


def test_stream_and_rounds_are_in_the_identity_and_the_group():
    idents = {
        s: TraceConfig(method="tent", stream=s, rounds=r).resolved().trace_identity("random", "cpu:x")
        for s, r in (("continual", 1), ("continual", 2), ("mixed", 1), ("mixed", 2), ("gradual", 1))
    }
    keys = {ident.group for ident in idents.values()}
    assert len(keys) == len(idents)  # five groups: the simulator never pools them
    assert idents["continual"].differences(idents["mixed"]) == ["stream"]
    stems = {ident.file_stem() for ident in idents.values()}
    assert len(stems) == len(idents)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"stream": "wild"}, "--stream must be episodic, continual, gradual, mixed or dirichlet"),
        ({"stream": "continual", "rounds": 0}, "--rounds must be in 1..1000, not 0"),
        ({"stream": "episodic", "rounds": 2}, "--rounds repeats a stream that never resets"),
        ({"stream": "dirichlet", "dirichlet_alpha": 0.1, "rounds": 2}, "--stream dirichlet resets per domain"),
        ({"stream": "continual:x3", "rounds": 2}, "names 3 rounds but --rounds is 2"),
        ({"stream": "gradual", "severity": 1}, "needs --severity 2..5, not 1"),
        ({"stream": "gradual", "domains": ["fog", "clean"]}, "'clean' domain has none"),
        ({"stream": "gradual", "dataset": "imagenet-r"}, "dataset 'imagenet-r' has no severities"),
    ],
)
def test_bad_values_are_one_line_config_errors(kw, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")) as err:
        TraceConfig(method="tent", **kw).resolved()
    assert "\n" not in str(err.value)


def test_the_command_line_refuses_bad_values_in_one_line(tmp_path, capsys):
    from tempora_trace.cli import main

    for argv in (
        ["--stream", "wild"],
        ["--rounds", "0"],
        ["--stream", "episodic", "--rounds", "2"],
        ["--stream", "gradual", "--severity", "1"],
    ):
        assert main(["run", "--method", "tent", "--out", str(tmp_path / "out"), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))
    opts = ["--method", "tent", "--out", str(tmp_path / "out"), "--stream", "mixed"]
    assert main(["live", *opts, "--lambda-ms", "1", "--rho", "1"]) == 2
    assert "live plays episodic and continual streams" in capsys.readouterr().err


# ---------------------------------------------------------------------- traces on tiny data
def _adapt_rows(path):
    table = pq.read_table(path)
    meta = schema.decode_metadata(table.schema, path)
    schema.validate_table(table, meta, path)
    return meta, [r for r in table.to_pylist() if r["phase"] == schema.PHASE_ADAPT]


@pytest.mark.parametrize(
    ("stream", "rounds", "expected"),
    [
        # cifar_c_root: two domains of 32 images per severity, batches of 8
        ("mixed", 1, [("mixed", 5)] * 8),
        ("gradual", 1, [(d, s) for d in ("gaussian_noise", "fog") for s in (1, 2, 3, 2, 1) for _ in range(4)]),
        ("continual", 2, [(d, 3) for _ in range(2) for d in ("gaussian_noise", "fog") for _ in range(4)]),
        ("mixed", 2, [("mixed", 3)] * 16),
    ],
)
def test_traces_of_each_stream_on_tiny_data(cifar_c_root, tiny_models, tmp_path, stream, rounds, expected):
    sev = 5 if stream == "mixed" and rounds == 1 else 3
    path = trace_run(tiny_config(cifar_c_root, tmp_path, stream=stream, rounds=rounds, severity=sev, threads=1, warmup_batches=1))
    meta, adapt = _adapt_rows(path)
    assert meta["stream"] == schema.stream_name(stream, rounds) and meta["domains"] == ["gaussian_noise", "fog"]
    assert {r["episode"] for r in adapt} == {stream}
    assert [(r["domain"], r["severity"]) for r in adapt] == expected
    assert [r["step"] for r in adapt] == list(range(len(expected)))


@pytest.mark.parametrize("stream", ["gradual", "mixed:x2"])
def test_a_profile_times_the_first_batches_of_the_stream(cifar_c_root, tiny_models, tmp_path, stream):
    from tempora_trace.profiling import profile_run

    base, rounds = schema.stream_base(stream), schema.stream_rounds(stream)
    cfg = tiny_config(cifar_c_root, tmp_path, stream=base, rounds=rounds, profile_batches=6, threads=1, warmup_batches=1)
    meta, adapt = _adapt_rows(profile_run(cfg))
    assert meta["stream"] == stream and meta["profile_batches"] == 6
    (full,) = plan_stream(stream, ["gaussian_noise", "fog"], Opener({"gaussian_noise": 32, "fog": 32}), 5, 8, cfg.seed)
    assert [(r["domain"], r["severity"]) for r in adapt] == [(n, s) for n, s, _ in _steps(full)[:6]]


class Killed(Exception):
    pass


def _kill(index, name):
    raise Killed


@pytest.mark.parametrize("first", [{"stream": "continual"}, {"stream": "mixed", "rounds": 2}, {"stream": "gradual"}])
def test_resume_refuses_another_stream_or_rounds(cifar_c_root, tiny_models, tmp_path, first):
    """An interrupted run (its one episode on disk, the file not yet written) resumes only
    into the same stream and rounds; into its own it completes."""
    common = {"name": "same", "threads": 1, "max_batches": 1, "warmup_batches": 1}
    with pytest.raises(Killed):
        trace_run(tiny_config(cifar_c_root, tmp_path, **first, **common), on_episode_end=_kill)
    others = [{"stream": "continual"}, {"stream": "continual", "rounds": 2}, {"stream": "mixed"}, {"stream": "mixed", "rounds": 2}]
    others += [{"stream": "gradual"}, {"stream": "gradual", "rounds": 3}, {"stream": "episodic"}]
    for kw in others:
        if kw == first:
            continue
        with pytest.raises(OutputError, match=r"options differ from the interrupted run \(stream\)"):
            trace_run(tiny_config(cifar_c_root, tmp_path, resume=True, **kw, **common))
    meta, _ = _adapt_rows(trace_run(tiny_config(cifar_c_root, tmp_path, resume=True, **first, **common)))
    assert meta["stream"] == schema.stream_name(first["stream"], first.get("rounds", 1))


@pytest.mark.parametrize("stream", ["gradual", "mixed"])
def test_streams_on_a_folder_with_corruptions_on_the_fly(tmp_path, stream):
    flat = write_image_folder(tmp_path / "clean", domains=None, classes=("ant", "bee", "cat", "dog"))
    model = write_model_file(tmp_path / "m.py")
    cfg = TraceConfig(
        method="tent",
        dataset=f"folder:{flat}",
        model=f"{model}:build",
        weights="random",
        input_size=32,
        corruptions=["gaussian_noise", "brightness"],
        severity=2,
        stream=stream,
        batch_size=8,
        max_batches=2,
        out=str(tmp_path / "out"),
        quiet=True,
        warmup_batches=1,
    )
    meta, adapt = _adapt_rows(trace_run(cfg))
    assert meta["domains"] == ["gaussian_noise", "brightness"] and meta["severity"] == 2
    if stream == "gradual":
        assert [(r["domain"], r["severity"]) for r in adapt] == [
            (d, s) for d in ("gaussian_noise", "brightness") for s in (1, 2, 1) for _ in range(2)
        ]
    else:
        assert [(r["domain"], r["severity"]) for r in adapt] == [("mixed", 2)] * 4


def test_gradual_on_a_folder_without_severities_is_refused(tmp_path):
    nested = write_image_folder(tmp_path / "photos")
    with pytest.raises(ConfigError, match=r"has no severities \(a folder of clean images takes them with --corruptions\)"):
        TraceConfig(method="tent", dataset=f"folder:{nested}", stream="gradual").resolved()
    # a mixed stream over the folder's own domains needs none
    assert TraceConfig(method="tent", dataset=f"folder:{nested}", stream="mixed").resolved().stream == "mixed"


# ---------------------------------------------------------------------- the demo set, swept
@pytest.mark.slow
def test_demo_traces_of_each_stream_are_their_own_groups(tmp_path, monkeypatch):
    """``tempora-trace run`` on the demo data for each new stream, swept: every stream (and
    round count) is a group of its own, and the replay plays its one episode."""
    from tempora_sim.sweeps.replay import run_sweep
    from tempora_trace.cli import main

    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "256")
    common = ["--dataset", "demo", "--domains", "gaussian_noise,fog", "--batch-size", "32", "--max-batches", "2"]
    common += ["--frozen-sample", "2", "--threads", "1", "--out", str(tmp_path), "--quiet"]
    streams = [["--stream", "mixed"], ["--stream", "gradual", "--severity", "3"], ["--stream", "continual", "--rounds", "2"]]
    for method in ("standard", "tent"):
        for stream in streams:
            assert main(["run", "--method", method, *stream, *common]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == sorted(
        f"{m}-bs32-{s}.parquet" for m in ("standard", "tent") for s in ("mixed", "sev3-gradual", "continualx2")
    )
    import polars as pl

    frame = run_sweep(tmp_path, protocols="offline").frame
    assert set(frame["stream"].unique()) == {"mixed", "gradual", "continual:x2"}
    rows = frame.filter(pl.col("episode") != "__all__")
    assert set(zip(rows["stream"], rows["episode"])) == {("mixed", "mixed"), ("gradual", "gradual"), ("continual:x2", "continual")}
    assert frame.filter(pl.col("episode") == "__all__").height == 6
    # every protocol replays them, the amortised one on their frozen checkpoints
    every = run_sweep(tmp_path, protocols="offline,discrete,continuous,amortised").frame
    assert set(every["protocol"].unique()) == {"offline", "discrete", "continuous", "amortised"}
    assert set(every["stream"].unique()) == {"mixed", "gradual", "continual:x2"}


# ---------------------------------------------------------------------- campaigns
_CAMPAIGN = """
[campaign]
name = "streams"
out = "traces"

[machines.cpu]
device = "cpu"

[[groups]]
machine = "cpu"
dataset = "demo"
batch_size = 32
methods = ["tent"]
domains = ["gaussian_noise", "fog"]
streams = STREAMS
options = { max_batches = 2, threads = 1 }
"""


def test_a_campaign_traces_the_new_streams_by_name(tmp_path):
    from tempora_trace import options as trace_options
    from tempora_trace.campaign import CampaignError, load_campaign, trace_location

    path = tmp_path / "c.toml"
    path.write_text(_CAMPAIGN.replace("STREAMS", '["mixed", "gradual", "continual:x3"]'))
    campaign = load_campaign(path)
    names = sorted(trace_location(t, campaign.out).name for t in campaign.tasks)
    assert names == sorted(f"{m}-bs32-{s}.parquet" for m in ("standard", "tent") for s in ("mixed", "gradual", "continualx3"))
    long = next(t for t in campaign.tasks if t.stream == "continual:x3")
    opts = trace_options.parse_args("run", long.argv(campaign.out)[1:])
    assert opts["stream"] == "continual" and opts["rounds"] == 3
    assert len({t.group_key for t in campaign.tasks}) == 3
    for bad in ('["episodic:x2"]', '["continual:x1"]', '["wild"]'):
        path.write_text(_CAMPAIGN.replace("STREAMS", bad))
        with pytest.raises(CampaignError) as err:
            load_campaign(path)
        assert "\n" not in str(err.value)


def test_locate_finds_every_step_of_many_segments():
    """``Episode.locate`` (a binary search over segments, some empty) against a flat list."""
    from tempora_trace.data.streams import Episode

    rng = np.random.default_rng(0)
    for _ in range(100):
        lens = rng.integers(0, 4, rng.integers(1, 9)).tolist()
        ep = Episode("e", [Domain(f"d{k}", None, None) for k in range(len(lens))], [[np.array([i]) for i in range(n)] for n in lens])
        flat = [(f"d{k}", i) for k, n in enumerate(lens) for i in range(n)]
        assert [(ep.locate(s)[0].name, int(ep.locate(s)[1][0])) for s in range(ep.num_batches)] == flat
        for bad in (-1, ep.num_batches):
            with pytest.raises(IndexError):
                ep.locate(bad)
