"""The repository explains itself: no code, test or document cites a document a reader of
the repository cannot open. A rule is stated where it applies, or the text points to a
page in docs/ (ARCHITECTURE.md, api.md, tasks.md). Section-sign citations (`§4`), an
outside specification file, and an outside "seed" source or its framework's vocabulary
all fail here; the demo's data seeding and hash seeds are ordinary words and pass.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()

# Each pattern, and why a hit is a citation of something outside the repository.
FORBIDDEN: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"SPEC\.md", re.IGNORECASE), "an outside specification file"),
    (re.compile(r"\bSPEC\b"), "an outside specification"),
    (re.compile("\u00a7"), "a section-sign citation"),
    # "the seed", "as in the seed", "the seed's router": an outside source. The demo's
    # seeding ("seed it", "the demo's seed", "seeded") and "the hash seed" do not match.
    (re.compile(r"\bthe seed\b", re.IGNORECASE), "an outside source called the seed"),
    (re.compile(r"(?<!hash )\bseed's\b", re.IGNORECASE), "an outside source called the seed"),
    (re.compile(r"\bseeds/|headgate-api\.rs|fabro", re.IGNORECASE), "an outside source file"),
    (re.compile(r"/work/shared"), "a path outside the repository"),
    (re.compile(r"reference (implementation|API)\b", re.IGNORECASE), "an outside implementation"),
    (re.compile(r"\b(serde|axum)\b"), "the vocabulary of an outside implementation"),
]

# What a user or contributor reads: the package, its docs, examples, benchmarks,
# scripts and tests, and the top-level files.
AREAS = ["headgate", "docs", "examples", "bench", "scripts", "e2e", "tests", ".ci"]
TOP_FILES = ["README.md", "CHANGELOG.md", "app.py", "pyproject.toml"]
SKIP_DIRS = {"__pycache__", "vendor", "node_modules"}
SKIP_SUFFIXES = {".pyc", ".png", ".ico", ".woff", ".woff2", ".gz", ".db", ".sqlite"}


def text_files(area: str) -> list[Path]:
    base = ROOT / area
    if base.is_file():
        return [base]
    if not base.is_dir():
        return []
    return sorted(
        p for p in base.rglob("*")
        if p.is_file() and p.resolve() != THIS and p.suffix not in SKIP_SUFFIXES
        and not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)
    )


def why_cited(line: str) -> str | None:
    """Why `line` cites something outside the repository, or None."""
    for pattern, why in FORBIDDEN:
        if pattern.search(line):
            return why
    return None


def citations(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return []  # not text
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        why = why_cited(line)
        if why is not None:
            found.append(f"{path.relative_to(ROOT)}:{number}: {why}: {line.strip()[:120]}")
    return found


@pytest.mark.parametrize("area", AREAS + TOP_FILES)
def test_nothing_cites_a_document_outside_the_repository(area: str) -> None:
    hits = [hit for path in text_files(area) for hit in citations(path)]
    assert hits == [], "state the rule here or cite a page in docs/:\n" + "\n".join(hits)


@pytest.mark.parametrize(("line", "cites"), [
    ("The job lifecycle of SPEC \u00a74.", True),
    ("as in the seed's router", True),
    ("Decisions where the seed is silent:", True),
    ("See /work/shared/SPEC.md", True),
    ("mirror the serde structs", True),
    ("the seed `headgate-api.rs.txt`", True),
    ("section \u00a710 of the product description", True),
    ("Delete the demo file first and seed anew.", False),
    ("the dashboard demo's real seed (headgate.dashboard.demo.seed)", False),
    ("Create (or reuse) the demo database; seed it when it has no queues yet.", False),
    ("# PostgreSQL: the hash seed of hashtextextended() for a queue's lock", False),
    ("rng = random.Random(seed)  # a seeded soak", False),
    ("the spec is unchanged (re-deploying the same schedule)", False),
])
def test_the_patterns_tell_a_citation_from_the_word_seed(line: str, cites: bool) -> None:
    """The rule itself: it catches each way the repository used to cite, and leaves the
    demo's seeding, hash seeds and schedule specs alone."""
    assert (why_cited(line) is not None) is cites
