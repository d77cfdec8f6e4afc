"""Both programs leave without the interpreter's teardown
(:func:`tempora_toolkit.command_line.leave_program`): what an ordinary exit would still do for
the user must happen anyway. The whole output reaches a pipe, the exit status is the command's,
and the exit handlers run (a plugin's ``atexit`` hook, logging's flush)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.processes import child_env

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = {"tempora-trace": "tempora_trace.cli", "tempora-sim": "tempora_sim.commands.main"}


ORDINARY_EXIT = {
    "tempora_trace.cli": "from tempora_trace.cli import main\nsys.exit(main())\n",
    "tempora_sim.commands.main": "from tempora_sim.commands.main import main\nsys.exit(main.main(standalone_mode=False))\n",
}


def _program(module: str, args: list[str], marker: Path, ordinary: bool = False) -> subprocess.CompletedProcess:
    """``module``'s program run as its console script does (or, with ``ordinary``, its command
    group with the interpreter's ordinary exit), with an exit handler registered first that
    writes ``marker`` and a logging handler on standard error."""
    code = (
        "import atexit, logging, sys\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
        "handler = logging.StreamHandler(sys.stderr)\n"
        "handler.setFormatter(logging.Formatter('%(message)s'))\n"
        "logging.getLogger('exit-check').addHandler(handler)\n"
        "logging.getLogger('exit-check').warning('logged before the exit')\n"
        f"sys.argv = ['prog', *{args!r}]\n"
    ) + (ORDINARY_EXIT[module] if ordinary else f"from {module} import run\nrun()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=300)


@pytest.mark.parametrize("prog", list(PROGRAMS))
def test_the_whole_output_and_the_exit_handlers_survive_the_fast_exit(prog, tmp_path):
    ordinary = _program(PROGRAMS[prog], ["--help"], tmp_path / "ordinary", ordinary=True)
    proc = _program(PROGRAMS[prog], ["--help"], tmp_path / "marker")
    assert proc.returncode == ordinary.returncode == 0, proc.stderr
    assert proc.stdout == ordinary.stdout and len(proc.stdout) > 500
    assert (tmp_path / "marker").read_text() == "ran"
    assert "logged before the exit" in proc.stderr


@pytest.mark.parametrize("prog", list(PROGRAMS))
def test_a_refused_command_keeps_its_status_and_its_one_line(prog, tmp_path):
    proc = _program(PROGRAMS[prog], ["no-such-command"], tmp_path / "marker")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln != "logged before the exit"]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error:"), proc.stderr
    assert (tmp_path / "marker").read_text() == "ran"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_trace_written_by_the_program_is_complete(tmp_path):
    """The tracer's file is whole when the process ends: fsynced and renamed before the command
    returns, never left to the teardown."""
    import pyarrow.parquet as pq

    proc = subprocess.run(
        [sys.executable, "-m", "tempora_trace.cli", "run", "--method", "standard", "--domains", "fog", "--max-batches", "2",
         "--frozen-sample", "2", "--out", str(tmp_path), "--quiet"],
        capture_output=True, text=True, env=child_env(TEMPORA_DEMO_TEST_SIZE="64"), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(tmp_path / "standard.parquet").num_rows > 0
    assert not list(tmp_path.glob("*.partial"))
