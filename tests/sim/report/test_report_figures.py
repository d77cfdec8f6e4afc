"""Figures: stable per-method colours, the winners grid's tie cells, files that open."""

from __future__ import annotations

from matplotlib.colors import to_rgb

from helpers.utility_tables import WIN, grid, utility_frame
from tempora_sim import analyses as an
from tempora_sim import palette
from tempora_sim.reporting import figures as fg


def test_method_colours_are_fixed_and_stable():
    assert fg.method_colour("ETA") == fg.method_colour("eta") == fg.method_colour("E-T-A")
    assert fg.method_colour("shot-im") == fg.method_colour("shot_im")
    known = ["standard", "adabn", "lame", "neo", "tent", "eta", "shot-im", "sar", "deyo", "cmf"]
    assert len({fg.method_colour(m) for m in known}) == len(known)
    # unknown names: deterministic across calls and processes (crc32, not hash())
    import zlib

    assert fg.method_colour("my-new-method") == palette.FALLBACK[zlib.crc32(b"mynewmethod") % len(palette.FALLBACK)]


def test_winners_grid_marks_ties_and_writes_png_and_pdf(tmp_path):
    t = utility_frame(grid(WIN))
    w, wc = an.winners(t), an.win_counts(t)
    fig = fg.winners_grid(w, wc, "test")
    texts = [x.get_text() for x in fig.axes[0].texts]
    assert texts.count("tie") == 1  # fog at ρ=50%
    assert {"fast", "slow", "standard"} <= set(texts)
    legend = [x.get_text() for x in fig.axes[0].get_legend().get_texts()]
    assert legend == ["fast (4)", "slow (4)", "standard (1)", "tie"]
    png, pdf = fg.save(fig, tmp_path, "winners")
    assert png.read_bytes()[:4] == b"\x89PNG" and pdf.read_bytes()[:5] == b"%PDF-"


def test_utility_curves_grey_out_methods_below_standard():
    t = utility_frame(grid(WIN))
    fig = fg.utility_curves(t, ["fog"], an.method_order(t))
    disc = fig.axes[0]  # discrete row, fog: slow (30 % at ρ=50 %, 10 % at ρ=100 %) is below standard (20 %) at ρ=100 % only
    (scatter_slow,) = [c for c in disc.collections if c.get_offsets().shape[0] == 2 and c.get_offsets()[:, 1].tolist() == [30.0, 10.0]]
    colours = [tuple(round(v, 3) for v in c[:3]) for c in scatter_slow.get_facecolors()]
    grey = tuple(round(v, 3) for v in to_rgb(fg.BELOW_GREY))
    assert colours[1] == grey and colours[0] == tuple(round(v, 3) for v in to_rgb(fg.method_colour("slow")))


def test_representative_episodes_pick_one_per_category():
    eps = ["gaussian_noise", "shot_noise", "defocus_blur", "snow", "fog", "contrast", "pixelate", an.POOLED]
    assert an.representative_episodes(eps) == ["gaussian_noise", "defocus_blur", "snow", "contrast"]
    assert an.representative_episodes(["b", "a", "c", "d", "e"]) == ["a", "b", "c", "d"]


def test_report_modules_never_import_torch():
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))  # the same import path as this process
    code = (
        "import sys, tempora_sim.analyses, tempora_sim.reporting.figures, tempora_sim.reporting, tempora_sim.commands.report; "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0
