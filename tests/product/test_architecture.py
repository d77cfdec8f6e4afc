"""docs/design/architecture.md against the code: every module it names exists (and imports, where its
stack is installed), and the shared words it assigns to tempora_schema.vocabulary are spelled
out nowhere else."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from tempora_schema import vocabulary

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PAGE = (ROOT / "docs" / "design" / "architecture.md").read_text(encoding="utf-8")
PACKAGES = ("tempora_schema", "tempora_toolkit", "tempora_sim", "tempora_trace")

MODULES = sorted(set(re.findall(r"`((?:%s)(?:\.[a-z_]+)*)`" % "|".join(PACKAGES), PAGE)))
FILES = sorted(set(re.findall(r"`((?:%s)/[a-z_/]+\.py)`" % "|".join(PACKAGES), PAGE)))


def _diagram() -> list[tuple[str, str]]:
    """(package, module pattern) of each box in the package drawing: the schema's and the
    toolkit's trees first, then the tracer's column on the left and the simulator's on the right."""
    block = PAGE.split("```text", 1)[1].split("```", 1)[0]
    out, top = [], "tempora_schema"
    for line in block.splitlines():
        if "▲" in line:
            top = None
        elif top and "tempora_toolkit" in line:
            top = "tempora_toolkit"
        for match in re.finditer(r"[├└]── ([a-z_*/]+(?:, [a-z_*/]+)*)", line):
            package = top or ("tempora_trace" if match.start() < 40 else "tempora_sim")
            out += [(package, name.rstrip("/")) for name in match.group(1).split(", ")]
    return out


DIAGRAM = _diagram()


def _module_file(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_the_page_names_modules_and_files():
    assert len(MODULES) >= 20 and len(FILES) >= 7 and len(DIAGRAM) >= 45
    assert {"tempora_schema.discrete", "tempora_schema.vocabulary", "tempora_trace.options", "tempora_sim.engine.oracle"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_named_module_exists_and_imports(name):
    assert _module_file(name) is not None, f"docs/design/architecture.md names {name}, which is not a module under src/"
    if name.startswith("tempora_trace") and importlib.util.find_spec("torch") is None:
        pytest.skip("the tracer's stack is not installed")
    importlib.import_module(name)


@pytest.mark.parametrize("path", FILES)
def test_named_file_exists(path):
    assert (SRC / path).is_file(), f"docs/design/architecture.md names {path}, which is not under src/"


@pytest.mark.parametrize("package, pattern", DIAGRAM)
def test_drawn_module_exists(package, pattern):
    folder = SRC / package
    found = list(folder.glob(f"{pattern}.py")) + [d for d in folder.glob(pattern) if (d / "__init__.py").is_file()]
    assert found, f"docs/design/architecture.md draws {package}.{pattern}, which matches no module"


def _literal(words: tuple[str, ...]) -> re.Pattern:
    return re.compile(r",\s*".join(f'"{re.escape(w)}"' for w in words))


@pytest.mark.parametrize(
    "name", ["PROTOCOLS", "COMBINED_PROTOCOLS", "LIVE_PROTOCOLS", "BUDGET_RULES", "CORRUPTIONS", "CORRUPTION_CATEGORIES"]
)
def test_shared_words_are_declared_once(name):
    value = getattr(vocabulary, name)
    lists = list(value.values()) if isinstance(value, dict) else [value]
    patterns = [_literal(words[:2]) for words in lists]
    home = SRC / "tempora_schema" / "vocabulary.py"
    offenders = [
        f"{path.relative_to(ROOT)}: {pattern.pattern}"
        for path in sorted(SRC.rglob("*.py"))
        if path != home
        for pattern in patterns
        if pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"{name} spelled out outside tempora_schema.vocabulary:\n" + "\n".join(offenders)


#: The house's two measured limits (docs/design/architecture.md, "before and after"): a module a
#: newcomer can read at one sitting, and protocols named by their objects, not their words.
LARGEST_MODULE_LINES = 700
PROTOCOL_WORD_LINES = 15
PROTOCOL_WORD = re.compile(r'"(offline|discrete|continuous|amortised|discrete-continuous|discrete-amortised)"')


def test_no_module_outgrows_the_limit():
    sizes = {p.relative_to(SRC): len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.rglob("*.py")}
    over = {str(p): n for p, n in sizes.items() if n > LARGEST_MODULE_LINES}
    assert not over, f"split these modules (limit {LARGEST_MODULE_LINES} lines): {over}"


def test_protocols_are_named_by_their_objects_outside_their_package():
    """The page's count: lines of the simulator outside ``protocols/`` that spell a protocol's
    word; none in the validation, the analyses or the report's sentences."""
    hits = [
        (path.relative_to(SRC / "tempora_sim"), n)
        for path in (SRC / "tempora_sim").rglob("*.py")
        if "protocols" not in path.relative_to(SRC / "tempora_sim").parts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PROTOCOL_WORD.search(line)
    ]
    assert len(hits) <= PROTOCOL_WORD_LINES, hits
    assert not [h for h in hits if h[0].parts[0] in ("validation", "analyses") or h[0].name == "sentences.py"], hits
