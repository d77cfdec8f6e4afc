"""The progress view of the tracer's long steps: one bar per episode of a trace or a live run,
one for ``tempora-trace synthesize``. Nothing is drawn off a terminal or with ``--quiet``."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tempora_toolkit.command_line import visible


class ProgressView:
    """A rich progress bar per episode (or per long step) on stderr, drawn only on a terminal and
    without --quiet: ``start(name, total)``, ``advance(n)``, ``end()`` per task, ``close()`` once."""

    def __init__(self, enabled: bool):
        self.bar = None
        if enabled and sys.stderr.isatty():
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
        self.task = None

    def start(self, name: str, total: int) -> None:
        if self.bar is not None:
            self.task = self.bar.add_task(escape(visible(name)), total=total)  # a domain's name is text, not markup

    def advance(self, n: int = 1) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task, n)

    def end(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.remove_task(self.task)
            self.task = None

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
