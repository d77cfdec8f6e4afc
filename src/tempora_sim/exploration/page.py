"""The interactive page as a library: its data built from traces and written as one offline HTML file.

The simulator computes every number on dense grids (:mod:`tempora_sim.exploration.data`); the page
holds that data (gzip-compressed JSON, base64) and the chart library (Apache ECharts, vendored
under ``exploration/assets/vendor/``, see ``VENDOR.json``) inline, so it opens from disk with no
server and no network. ``tempora-sim explore`` (:mod:`tempora_sim.commands.explore`), the report
(:mod:`tempora_sim.reporting.build`) and :func:`tempora_sim.api.explore` all write it from here.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import warnings
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from tempora_toolkit.atomic_files import check_output_dir, write_file

ASSETS = "assets"
#: Every protocol, the combined ones included (the page's point is to move them).
DEFAULT_PROTOCOLS = "all,discrete-continuous,discrete-amortised"


def _asset(*parts: str) -> str:
    return resources.files("tempora_sim.exploration").joinpath(ASSETS, *parts).read_text(encoding="utf-8")


def vendor_record() -> dict:
    return json.loads(_asset("vendor", "VENDOR.json"))


_PLACEHOLDERS = ("__TITLE__", "__TOOL__", "/*__ECHARTS__*/", "/*__APP__*/", "__DATA__")
_PLACEHOLDER = re.compile("|".join(re.escape(k) for k in _PLACEHOLDERS))


def render_page(data: dict) -> bytes:
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
    return _PLACEHOLDER.sub(lambda m: values[m.group()], page).encode("utf-8")


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def check_out_file(out: str) -> Path:
    """``out`` as the page's path: a file name in an existing, writable folder (ExploreError otherwise)."""
    from tempora_sim.exploration.data import ExploreError  # lazy: the analyses load when the page is built

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
    return write_file(Path(out), render_page(data))


def build_page_data(traces, options, arrivals, bootstrap, progress: bool = True, warn: Callable[[str], None] | None = None) -> dict:
    """The page's data for ``traces`` (paths) under ``options`` (a SweepOptions) and each
    arrival process of ``arrivals``. The offline replay runs first, refused or warned about
    exactly as ``sweep`` is; its warnings go to ``warn`` (default: re-issued as SimWarning)."""
    from tempora_sim import protocols as P  # lazy, as the replay below: the page module loads with `--help`
    from tempora_sim.exploration.data import build_data, check_grid_sizes
    from tempora_sim.sweeps.replay import SimWarning, run_sweep
    from tempora_sim.sweeps.traces import load_traces

    for arrival in arrivals or ("periodic",):
        # every option checked, each arrival process included, before any trace is read
        check_grid_sizes(type(options).build(options, arrivals=arrival).resolve())
    traceset = load_traces([str(p) for p in traces] if len(traces) > 1 else str(traces[0]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SimWarning)
        run_sweep(traceset, type(options).build(options, protocols=P.reference(), arrivals="periodic", arrival_seeds=1))
    for w in caught:
        if issubclass(w.category, SimWarning):
            if warn is not None:
                warn(str(w.message))
            else:
                warnings.warn(str(w.message), SimWarning, stacklevel=2)
    return build_data(traceset, options, arrivals or ("periodic",), bootstrap, source=", ".join(map(str, traces)), progress=progress)
