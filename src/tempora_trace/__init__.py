"""tempora_trace: run one TTA method once on the target device and write a trace (schema v2, docs/reference/trace-schema.md).

Everything that touches torch lives here; no utility is ever computed here (docs/design/design.md §1).

The notebook API: ``import tempora_trace as tt``, then ``tt.trace``, ``tt.profile``,
``tt.calibrate``, ``tt.live`` (defined in :mod:`tempora_trace.api`; docs/guide/python-api.md),
imported on first use so that ``tempora-trace --help`` does not load torch.
"""

from importlib.util import find_spec

if find_spec("torch") is None:  # a simulator-only install (the base package or tempora-tta[sim])
    raise ModuleNotFoundError("tempora_trace needs PyTorch and the tracer's stack: pip install 'tempora-tta[trace]'", name="torch")


#: The notebook API (tempora_trace.api).
_API = ("trace", "profile", "calibrate", "live", "TraceConfig", "LiveSettings", "Calibration")
__all__ = [*_API, "__version__"]


def __getattr__(name: str):
    # The version is read from the package metadata (declared once, in pyproject.toml) on first
    # use, not at import: the command line installs its Ctrl-C guard after this module runs.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("tempora-tta")
        except PackageNotFoundError:  # a source tree on sys.path that was never installed
            return "0+unknown"
    if name in _API:
        from tempora_trace import api

        return getattr(api, name)
    raise AttributeError(f"module 'tempora_trace' has no attribute '{name}'")
