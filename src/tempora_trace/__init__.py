"""tempora_trace: run one TTA method once on the target device and write a trace (schema v2, docs/reference/trace-schema.md).

Everything that touches torch lives here; no utility is ever computed here (docs/design/design.md §1).
"""

from importlib.util import find_spec

if find_spec("torch") is None:  # a simulator-only install (the base package or tempora-tta[sim])
    raise ModuleNotFoundError("tempora_trace needs PyTorch and the tracer's stack: pip install 'tempora-tta[trace]'", name="torch")


def __getattr__(name: str) -> str:
    # The version is read from the package metadata (declared once, in pyproject.toml) on first
    # use, not at import: the command line installs its Ctrl-C guard after this module runs.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("tempora-tta")
        except PackageNotFoundError:  # a source tree on sys.path that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'tempora_trace' has no attribute '{name}'")
