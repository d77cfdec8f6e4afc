"""The report: every analysis as a table (Markdown + CSV), the figures, and a plain-language
summary generated from the numbers, in one directory; and the tables ``tempora-sim sweep``
prints.

Modules, named by what each produces:

* :mod:`.inputs` — ``ReportInputs``, loaded from sweep results or swept from traces;
* :mod:`.registry` — the one table registry (``TableSpec``, every table, ``compute_table``);
* :mod:`.markdown` — cell formats, ``Column``, pivoted layouts, Markdown and CSV tables;
* :mod:`.groups` — the comparison groups a report is split into;
* :mod:`.sentences` — the summary lines;
* :mod:`.figures` — the figures (matplotlib, imported only when figures are drawn);
* :mod:`.scenarios`, :mod:`.devices` — the sections beyond the paper;
* :mod:`.terminal` — the tables ``tempora-sim sweep`` prints;
* :mod:`.build` — ``build_report``, which writes the directory.
"""

from __future__ import annotations

from tempora_sim.reporting.build import (
    EXPLORE_FILE,
    REPORT_FILES,
    REPORT_FOLDERS,
    SCENARIOS_FILE,
    SECTIONS,
    ReportResult,
    build_report,
)
from tempora_sim.reporting.groups import filter_group, group_label, groups_of
from tempora_sim.reporting.inputs import (
    RESULTS_FILE,
    TRACE_TIMES_FILE,
    ReportError,
    ReportInputs,
    load_inputs,
    results_path,
)
from tempora_sim.reporting.markdown import FORMATS, Column, csv_frame, formatted_rows, markdown_table
from tempora_sim.reporting.registry import TABLES, TableSpec, compute_table, why_missing
from tempora_sim.reporting.sentences import summary_lines
from tempora_sim.reporting.terminal import print_report

__all__ = [
    "EXPLORE_FILE",
    "FORMATS",
    "REPORT_FILES",
    "REPORT_FOLDERS",
    "RESULTS_FILE",
    "SCENARIOS_FILE",
    "SECTIONS",
    "TABLES",
    "TRACE_TIMES_FILE",
    "Column",
    "ReportError",
    "ReportInputs",
    "ReportResult",
    "TableSpec",
    "build_report",
    "compute_table",
    "csv_frame",
    "filter_group",
    "formatted_rows",
    "group_label",
    "groups_of",
    "load_inputs",
    "markdown_table",
    "print_report",
    "results_path",
    "summary_lines",
    "why_missing",
]
