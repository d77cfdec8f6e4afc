"""tempora_trace: run one TTA method once on the target device and write a schema-v1 trace.

Everything that touches torch lives here; no utility is ever computed here (docs/design.md §1).
"""

from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec

try:
    __version__ = version("tempora")  # the one place it is declared: pyproject.toml
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

if find_spec("torch") is None:  # a simulator-only install (the base package or tempora[sim])
    raise ModuleNotFoundError("tempora_trace needs PyTorch and the tracer's stack: pip install 'tempora[trace]'", name="torch")
