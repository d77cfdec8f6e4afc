"""The report's comparison across devices: one setting traced on two machines."""

from __future__ import annotations

from tempora_sim.reporting import build_report, load_inputs
from tempora_sim.reporting.devices import device_winners
from tempora_sim.sweeps.synthetic import write_trace

METHODS = ("standard", "tent", "eta", "shot-im")


def test_winners_side_by_side_and_disagreements_marked(tmp_path):
    # on the "cpu" machine eta's steps cost 6× (a slow backward): it stops winning under pressure
    for device, slow in (("cuda:synthetic-gpu", 1.0), ("cpu:synthetic", 6.0)):
        for m in METHODS:
            write_trace(
                tmp_path / device.split(":")[0] / f"{m}.parquet", m, num_batches=40, device=device, time_scale=slow if m == "eta" else 1.0
            )
    inp = load_inputs(tmp_path, {"rho": "1,0.25", "T_ms": "400ms", "B_ms": "2s"})
    tables = device_winners(inp.utility)
    assert len(tables) == 1
    (table,) = tables.values()
    assert set(table.columns) >= {"cpu:synthetic", "cuda:synthetic-gpu", "differs"}
    offline = table.filter(table["protocol"] == "offline").row(0, named=True)
    assert offline["cpu:synthetic"] == offline["cuda:synthetic-gpu"] == "eta" and not offline["differs"]
    strict = table.filter((table["protocol"] == "discrete") & (table["value"] == 1.0)).row(0, named=True)
    assert strict["cuda:synthetic-gpu"] == "eta" and strict["cpu:synthetic"] != "eta" and strict["differs"]
    text = build_report(inp, tmp_path / "report", figures=False).report.read_text()
    assert "## Across devices" in text and "←" in text


def test_no_section_for_one_device(tmp_path):
    for m in METHODS:
        write_trace(tmp_path / f"{m}.parquet", m, num_batches=30)
    inp = load_inputs(tmp_path, {"rho": "1", "T_ms": "400ms", "B_ms": "2s"})
    assert device_winners(inp.utility) == {}
