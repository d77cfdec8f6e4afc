"""The documentation is self-contained and its generated parts cover the code.

Fast checks that run with the test suite (the full site build, ``make docs``, runs on CI):
nothing in the repository points to files a user cannot see; every page the site's
navigation names exists; links between README and pages resolve; the methods reference is
generated for every registered method.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: Text that would send a reader to files outside this repository, or talk about where the
#: project was built rather than about the product. Built from parts so this file does not
#: match itself.
FORBIDDEN = [
    re.compile(r"(?<![\w.-])" + "shared" + r"/"),
    re.compile("DESIGN" + r"\.md"),
    re.compile("design " + "of record", re.IGNORECASE),
    re.compile("steering " + "repo", re.IGNORECASE),
    re.compile(r"(?<![\w.])" + "DESIGN" + r" §"),
    # the product speaks about itself, not about where it was built
    re.compile("development " + r"(?:machine|VM|CPU)", re.IGNORECASE),
]
#: Files allowed to mention history (a changelog may name what moved where).
HISTORY_FILES = {"CHANGELOG.md"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".sh", ".cff", ""}


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools" / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        names = out.splitlines()
    except (OSError, subprocess.CalledProcessError):  # an exported tree without git
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts]
    files = []
    for name in names:
        path = ROOT / name
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name == "Makefile"):
            files.append(path)
    return files


def test_no_file_points_outside_the_repository():
    offenders = []
    for path in _tracked_text_files():
        if path.name in HISTORY_FILES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in FORBIDDEN):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:100]}")
    assert not offenders, "references to files users cannot see:\n" + "\n".join(offenders)


#: ``pip install NAME`` and ``NAME[extra]`` where NAME starts with ``tempora``: this project's distribution
INSTALL_NAMES = (
    re.compile(r"pip install\s+['\"]?(tempora[\w.-]*)"),
    re.compile(r"(?<![\w/.-])(tempora[\w.-]*)\[(?:trace|sim|cluster|dev|docs)"),
)


def test_every_install_command_names_this_distribution():
    """``tempora`` on the package index is an unrelated package: the docs, the README, the
    examples and the code's own messages install this project by its distribution's name."""
    distribution = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
    found, offenders = 0, []
    for path in _tracked_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for name in (m.group(1) for p in INSTALL_NAMES for m in p.finditer(line)):
                found += 1
                if name != distribution:
                    offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:100]}")
    assert found >= 10 and not offenders, f"install commands that do not name {distribution}:\n" + "\n".join(offenders)


def _mkdocs_config() -> dict:
    # mkdocs.yml uses no custom tags; a plain safe load reads it.
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def test_every_page_in_the_site_navigation_exists():
    config = _mkdocs_config()
    assert config["docs_dir"] == "docs"
    pages = _hooks().nav_files(config["nav"])
    assert "index.md" in pages and "design/design.md" in pages
    missing = [p for p in pages if not (DOCS / p).is_file()]
    assert not missing, f"mkdocs.yml nav names missing page(s): {missing}"
    for hook in config.get("hooks", []):
        assert (ROOT / hook).is_file(), hook


def test_unlisted_pages_are_appended_to_the_navigation(tmp_path):
    hooks = _hooks()
    (tmp_path / "a.md").write_text("# A\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# B\n")
    (tmp_path / "c.md").write_text("# C\n")
    config = {"docs_dir": str(tmp_path), "nav": [{"Home": "a.md"}, {"Group": [{"C": "c.md"}]}]}
    hooks.on_config(config)
    assert config["nav"][-1] == {hooks.MORE_SECTION: ["sub/b.md"]}
    config = {"docs_dir": str(tmp_path), "nav": [{"Home": "a.md"}, "c.md", {"B": "sub/b.md"}]}
    hooks.on_config(config)
    assert len(config["nav"]) == 3  # nothing unlisted: nothing appended


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(path: Path) -> list[tuple[str, Path]]:
    out = []
    for target in _LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        file_part = target.split("#", 1)[0]
        out.append((target, (path.parent / file_part).resolve()))
    return out


def test_readme_and_pages_link_only_to_files_that_exist():
    broken = []
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for target, resolved in _relative_links(page):
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_generated_blocks_are_known():
    hooks = _hooks()
    for page in DOCS.rglob("*.md"):
        for name, _argument in hooks.MARKER.findall(page.read_text(encoding="utf-8")):
            assert name in hooks.GENERATORS, f"{page.name}: unknown generated block '{name}'"
    with pytest.raises(ValueError, match="unknown generated block"):
        hooks.render("<!-- generated: no-such-block -->")


def test_methods_reference_covers_every_registered_method():
    from tempora_trace.methods import builtin_methods, get_method
    from tempora_trace.methods.base import MethodContext

    hooks = _hooks()
    table = hooks.methods_table()
    rows = [line for line in table.splitlines()[2:] if line.startswith("| ")]
    names = builtin_methods()
    assert len(rows) == len(names)
    details = hooks.method_details()
    for name in names:
        cls = get_method(name)
        row = next((r for r in rows if r.startswith(f"| [`{name}`]")), None)
        assert row is not None, f"method '{name}' missing from the generated table"
        # the row says what the class declares, so the table changes when the code does
        assert " ".join(cls.paper.split()).replace("|", "\\|") in row or not cls.paper
        assert cls.family in row
        assert f"{{ #{hooks.anchor(name)} }}" in details
        for key in cls.default_params(MethodContext(num_classes=1000)):
            assert f"`{key}`" in details
    # the page asks for both blocks
    page = (DOCS / "reference" / "methods.md").read_text(encoding="utf-8")
    assert "<!-- generated: methods-table -->" in page and "<!-- generated: method-details -->" in page


def test_license_and_citation_match_the_package():
    from importlib.metadata import version

    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    static = re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE)
    project = {
        "license": re.search(r'^license = "([^"]+)"', pyproject, re.MULTILINE).group(1),
        "version": static.group(1) if static else version("tempora-tta"),
    }
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["license"] == project["license"]
    assert str(citation["version"]) == project["version"], "bump CITATION.cff's version with the package's"
    assert citation["preferred-citation"]["year"] == 2026


@pytest.mark.parametrize("target", ["tempora_sim.commands.main:main", "tempora_trace.cli:cli"])
def test_cli_reference_lists_every_command_and_option(target):
    import click

    hooks = _hooks()
    text = hooks.cli_reference(target)
    root = hooks.cli_command(target)
    pages = [p.read_text(encoding="utf-8") for p in (DOCS / "reference").glob("*.md")]
    assert any(f"<!-- generated: cli-reference {target} -->" in page for page in pages)

    def walk(command, ctx):
        assert f"`{ctx.command_path}`" in text
        for param in command.get_params(ctx):
            if isinstance(param, click.Option) and "--help" not in param.opts:
                row = next((line for line in text.splitlines() if line.startswith(f"| `{param.opts[0]}`")), None)
                assert row is not None, f"{ctx.command_path} {param.opts[0]} missing"
                assert row.count(" | ") >= 2  # option | value | meaning: pipes in help are escaped
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(root, click.Context(root, info_name=root.name))
    assert "<dataset>" not in text.replace("`", "")  # angle brackets escaped outside code


def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= 12 * 1024, f"README.md is {len(readme)} bytes; reference material belongs in docs/"
    text = readme.decode("utf-8")
    for needed in (
        "make install",
        "make demo",
        "make test",
        "tempora-trace",
        "tempora-sim",
        "docs/design/design.md",
        "docs/img/demo-winners.png",
    ):
        assert needed in text, needed
