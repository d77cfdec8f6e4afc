"""tempora_trace: run one TTA method once on the target device and write a schema-v1 trace.

Everything that touches torch lives here; no utility is ever computed here (docs/design.md §1).
"""

__version__ = "0.1.0"
