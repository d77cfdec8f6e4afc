"""``tempora-sim explore``: one self-contained HTML page to move ρ, T and B and watch the winners.

The simulator computes every number on dense grids (:mod:`tempora_sim.exploration.data`); the page
holds that data (gzip-compressed JSON, base64) and the chart library (Apache ECharts, vendored
under ``exploration/assets/vendor/``, see ``VENDOR.json``) inline, so it opens from disk with no
server and no network. The file is written atomically: a reader sees the previous page or the
new one. Bad input is one line on stderr and exit status 2, with nothing written.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from tempora_sim.commands.main import main
from tempora_sim.exploration.page import (
    DEFAULT_PROTOCOLS,
    build_page_data,
    check_out_file,
    render_page,
    vendor_record,
    write_page,
)
from tempora_sim.sweeps.options import SweepOptions, from_click
from tempora_sim.sweeps.options import click_options as sweep_click_options
from tempora_sim.uncertainty.bootstrap import bootstrap_options, make_bootstrap

__all__ = ["DEFAULT_PROTOCOLS", "build", "check_out_file", "render_page", "vendor_record", "write_page"]


def build(traces, options, arrivals, bootstrap, progress: bool = True) -> dict:
    """The page's data, the offline replay's warnings printed as one line each."""
    return build_page_data(
        traces, options, arrivals, bootstrap, progress, warn=lambda m: click.echo(f"tempora-sim: warning: {m}", err=True)
    )


def _arrivals_multiple(fn):
    """The sweep's ``--arrivals``, repeatable: each process is one entry of the page's selector."""
    params = getattr(fn, "__click_params__", [])
    for k, p in enumerate(params):
        if p.name == "arrivals":
            params[k] = click.Option(
                ["--arrivals", "arrivals"],
                multiple=True,
                help=f"{p.help.split('  [default')[0]} Repeat to compare processes (a selector on the page).  [default: periodic]",
            )
    return fn


@main.command("explore")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(path_type=str), help="The HTML file to write (e.g. explore.html).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@_arrivals_multiple
@sweep_click_options
@bootstrap_options
def explore_command(traces, out, quiet, ci_level, resamples, ci_seed, timing_replicates, **options):
    """Write one self-contained HTML page to move ρ, T and B over TRACES and watch the winners.

    Every protocol is replayed on dense grids (≥ 100 values of ρ, T and B, the combined
    protocols on 2-D grids) with bootstrap intervals; the page opens from disk, offline."""
    arrivals = tuple(options.pop("arrivals", ()) or ())
    sweep_options = from_click(options)
    if "protocols" not in sweep_options.given():
        sweep_options = SweepOptions.build(sweep_options, protocols=DEFAULT_PROTOCOLS)
    path = check_out_file(out)
    boot = make_bootstrap(ci_level, resamples, ci_seed, timing_replicates)
    t0 = time.perf_counter()
    data = build(traces, sweep_options, arrivals, boot, progress=not quiet)
    write_page(data, path)
    size = path.stat().st_size
    click.echo(f"wrote {path} ({size / 1e6:.2f} MB, {len(data['groups'])} group(s)) in {time.perf_counter() - t0:.1f} s")
