"""``tempora-sim migrate``: rewrite schema-v1 traces as v2 (docs/reference/trace-schema.md)."""

from __future__ import annotations

from pathlib import Path

import click

from tempora_sim.commands.main import main


@main.command("migrate")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--weights",
    required=True,
    help="The weights the traces were made with: a weights file (its sha256 is recorded), 'sha256:<hex>', or 'random'.",
)
@click.option("--threads", required=True, type=click.IntRange(min=1), help="The torch thread count they were traced with.")
@click.option(
    "--max-batches",
    "max_batches",
    type=click.IntRange(min=1),
    default=None,
    help="The --max-batches they were traced with. [default: none, all batches]",
)
def migrate_command(traces, weights, threads, max_batches):
    """Rewrite the v1 TRACES (files or directories of *.parquet) as schema v2, in place.

    Domains and severity are read from the rows; the weights, the thread count and
    --max-batches are what you give (v1 did not record them); the machine-speed probe is left
    empty (not measured). v2 files are left alone. Each file is checked against the v2 rules
    and replaced atomically.
    """
    # lazy: pyarrow and the trace reader load when migrate runs, not with `tempora-sim --help`
    from tempora_sim.sweeps.migrate import migrate_files
    from tempora_sim.sweeps.traces import find_trace_files

    files = find_trace_files([str(p) for p in traces])  # errors are TemporaError: one line, exit 2
    changed = migrate_files(
        files, weights=weights, threads=threads, max_batches=max_batches, on_migrated=lambda p: click.echo(f"migrated {p}")
    )
    click.echo(f"{changed} of {len(files)} file(s) rewritten as schema v2")
