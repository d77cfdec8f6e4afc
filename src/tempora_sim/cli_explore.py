"""``tempora-sim explore``: one self-contained HTML page to move ρ, T and B and watch the winners.

The simulator computes every number on dense grids (:mod:`tempora_sim.explore`); the page
holds that data (gzip-compressed JSON, base64) and the chart library (Apache ECharts, vendored
under ``explore_assets/vendor/``, see ``VENDOR.json``) inline, so it opens from disk with no
server and no network. The file is written atomically: a reader sees the previous page or the
new one. Bad input is one line on stderr and exit status 2, with nothing written.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import time
import warnings
from importlib import resources
from pathlib import Path

import click

from tempora_schema.outputs import check_output_dir, write_file
from tempora_sim.cli import main
from tempora_sim.options import click_options as sweep_options
from tempora_sim.options import from_click
from tempora_sim.stats import bootstrap_options, make_bootstrap

from .options import SweepOptions

ASSETS = "explore_assets"
#: Every protocol, the combined ones included (the page's point is to move them).
DEFAULT_PROTOCOLS = "all,discrete-continuous,discrete-amortised"


def _asset(*parts: str) -> str:
    return resources.files("tempora_sim").joinpath(ASSETS, *parts).read_text(encoding="utf-8")


def vendor_record() -> dict:
    """Name, version, integrity and sha256 of the inlined chart library."""
    return json.loads(_asset("vendor", "VENDOR.json"))


def render_page(data: dict) -> bytes:
    """The HTML page for ``data`` (:func:`tempora_sim.explore.build_data`), as bytes."""
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).encode("utf-8")
    packed = base64.b64encode(gzip.compress(payload, compresslevel=9, mtime=0)).decode("ascii")
    page = _asset("page.html")
    title = "Tempora explorer: " + ", ".join(g["title"] for g in data["groups"])[:200]
    vendor = vendor_record()
    lib = f"/* {vendor['package']} {vendor['version']} ({vendor['licence']}), {vendor['integrity']} */\n" + _asset("vendor", vendor["file"])
    values = {
        "__TITLE__": _html(title),
        "__TOOL__": _html(data["tool"]),
        "/*__ECHARTS__*/": lib,
        "/*__APP__*/": _asset("app.js"),
        "__DATA__": packed,
    }
    # one pass over the template: what is put in is never searched again, so a name holding a
    # placeholder (a method called __DATA__) stays a name
    page = _PLACEHOLDERS.sub(lambda m: values[m.group()], page)
    return page.encode("utf-8")


_PLACEHOLDERS = re.compile("|".join(re.escape(k) for k in ("__TITLE__", "__TOOL__", "/*__ECHARTS__*/", "/*__APP__*/", "__DATA__")))


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def check_out_file(out: str) -> Path:
    """Refuse an output file that can never be written, before anything is read or replayed."""
    from .explore import ExploreError  # lazy: the analyses load when the command runs, not with `tempora-sim --help`

    text = os.fspath(out)
    if not text.strip():
        raise ExploreError("--out is empty; give a file name such as explore.html")
    path = Path(text).expanduser()
    if path.is_dir():
        raise ExploreError(f"--out {path} is a folder; give a file name such as {path / 'explore.html'}")
    if not path.parent.exists():
        raise ExploreError(f"--out {path}: folder {path.parent} does not exist")
    check_output_dir(path.parent, option="--out")  # a file where the folder goes, permissions, read-only mounts
    return path


def write_page(data: dict, out: str | Path) -> Path:
    """Write the page for ``data`` to ``out`` atomically (temporary file, fsync, rename)."""
    return write_file(Path(out), render_page(data))


def build(traces, options, arrivals, bootstrap, progress: bool = True) -> dict:
    """Load ``traces`` and compute the page's data, echoing the simulator's warnings once."""
    # lazy: the replay and the analyses load when explore runs, not with `tempora-sim --help`
    from .explore import build_data, check_grid_sizes
    from .replay import SimWarning, run_sweep
    from .traces import load_traces

    for arrival in arrivals or ("periodic",):
        # every option checked, each arrival process included, before any trace is read
        check_grid_sizes(type(options).build(options, arrivals=arrival).resolve())
    traceset = load_traces([str(p) for p in traces] if len(traces) > 1 else str(traces[0]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SimWarning)
        # the offline replay: what `sweep` would say about these traces (λ, speed spread …),
        # refused or warned about exactly as `sweep` does
        run_sweep(traceset, type(options).build(options, protocols="offline", arrivals="periodic", arrival_seeds=1))
    for w in caught:
        if issubclass(w.category, SimWarning):
            click.echo(f"tempora-sim: warning: {w.message}", err=True)
    return build_data(traceset, options, arrivals or ("periodic",), bootstrap, source=", ".join(map(str, traces)), progress=progress)


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
@sweep_options
@bootstrap_options
def explore_command(traces, out, quiet, ci_level, resamples, ci_seed, timing_replicates, **options):
    """Write one self-contained HTML page to move ρ, T and B over TRACES and watch the winners.

    Every protocol is replayed on dense grids (≥ 100 values of ρ, T and B, the combined
    protocols on 2-D grids) with bootstrap intervals; the page opens from disk, offline."""
    arrivals = tuple(options.pop("arrivals", ()) or ())
    opts = from_click(options)
    if "protocols" not in opts.given():
        opts = SweepOptions.build(opts, protocols=DEFAULT_PROTOCOLS)
    path = check_out_file(out)
    boot = make_bootstrap(ci_level, resamples, ci_seed, timing_replicates)
    t0 = time.perf_counter()
    data = build(traces, opts, arrivals, boot, progress=not quiet)
    write_page(data, path)
    size = path.stat().st_size
    click.echo(f"wrote {path} ({size / 1e6:.2f} MB, {len(data['groups'])} group(s)) in {time.perf_counter() - t0:.1f} s")
