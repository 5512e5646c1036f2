"""Every fact the repository cites is findable in the repository (docs/architecture.md).

Code, help texts, plan lines and reports cite ``docs/<page>.md`` (optionally ``#section``); they
may not cite documents a user of the repository does not have — the lab's old reference notes,
its seed texts, its design card, or an issue number of its own tracker. Every ``docs/`` link,
in the code and between the docs pages, must name a page and a section that exist.

Outside repositories' issues cited as primary sources (``terraform-aws-eks #2203``) are fine:
they are public and named by repository.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: Not scanned: the tests (they plant citations, and name fixtures) and the docs themselves
#: (which name the lab's own sources by title), plus what is not the project's text.
SKIP_DIRS = {".git", "tests", "docs", "__pycache__", ".pytest_cache", "rehearsals", ".venv",
             "venv", "node_modules"}

#: Files allowed to cite an outside document: none. (A file once split elsewhere waited here
#: for its citations to be replaced; keep the set empty.)
KNOWN_EXCEPTIONS: set[str] = set()

#: Citations of documents outside the repository, each with what it catches.
OUTSIDE = [
    (re.compile(r"\bREFERENCE\b"), "the old reference notes (REFERENCE §…)"),
    (re.compile(r"(?<!hash )\bseeds?\b(?:'s)?", re.IGNORECASE), "a seed text"),
    (re.compile(r"\bDESIGN(?:\.md)?\b"), "the design card (DESIGN.md)"),
    (re.compile(r"\bissues? #?\d+", re.IGNORECASE), "an issue number"),
    (re.compile(r"\bcharts/README\.md\b"), "the chart sources' README (outside the repository)"),
    # docs/ pages are cited by a section's anchor; a numbered section ("the demo guide §7") is
    # one of a document outside the repository, whose numbers the docs do not keep.
    (re.compile(r"§\s*\d"), "a numbered section (§N) of a document outside the repository"),
]

#: A text every match of the OUTSIDE pattern in the same place holds, in lower case.
NEEDLES = ("reference", "seed", "design", "issue", "charts/readme.md", "§")
assert len(NEEDLES) == len(OUTSIDE)

#: A docs link: ``docs/page.md`` or ``docs/page.md#anchor`` in code; ``](page.md#anchor)``
#: between docs pages.
DOCS_LINK = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)(?:#([A-Za-z0-9_-]+))?")
RELATIVE_LINK = re.compile(r"\]\(([A-Za-z0-9_.-]+\.md)(?:#([A-Za-z0-9_-]+))?\)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`", "", heading.strip().lower())
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(page: Path) -> set[str]:
    """(Cached: a page is linked to many times, and the docs do not change during a run.)"""
    found: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6}\s+(.*)", line)):
            found.add(anchor(m.group(1)))
    return found


def project_files():
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if not path.is_file() or SKIP_DIRS.intersection(rel.parts[:-1]) or rel.parts[0] in SKIP_DIRS:
            continue
        try:
            yield rel.as_posix(), path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue


def outside_citations(rel: str, text: str) -> list[str]:
    # Line by line only in a file where some pattern matches at all (a match in a line is one in
    # the whole text), and a pattern is searched for only where its needle is: most files hold
    # no citation, and a regex starting at \b is tried at every character.
    low = text.lower()
    if not any(pattern.search(text) for (pattern, _), needle in zip(OUTSIDE, NEEDLES) if needle in low):
        return []
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in OUTSIDE:
            for m in pattern.finditer(line):
                # The README names ../shared as where the tests' material comes from; that is
                # a place, not a cited document.
                found.append(f"{rel}:{number}: {m.group(0)!r} cites {what}")
    return found


def broken_docs_links(rel: str, text: str, relative: bool = False) -> list[str]:
    if not (RELATIVE_LINK if relative else DOCS_LINK).search(text):
        return []
    broken = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in (RELATIVE_LINK if relative else DOCS_LINK).finditer(line):
            page, section = m.group(1), m.group(2)
            target = DOCS / page
            if not target.is_file():
                broken.append(f"{rel}:{number}: docs/{page} does not exist")
            elif section and section not in anchors(target):
                broken.append(f"{rel}:{number}: docs/{page} has no section #{section}")
    return broken


def test_nothing_cites_a_document_outside_the_repository():
    found = [c for rel, text in project_files() if rel not in KNOWN_EXCEPTIONS
             for c in outside_citations(rel, text)]
    assert not found, "cite a docs/ page instead:\n" + "\n".join(found)


def test_every_docs_link_names_a_page_and_section_that_exist():
    broken = [b for rel, text in project_files() for b in broken_docs_links(rel, text)]
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(ROOT).as_posix()
        broken += broken_docs_links(rel, text) + broken_docs_links(rel, text, relative=True)
    assert not broken, "\n".join(broken)


def test_the_known_exceptions_still_exist():
    """Once a split file is gone (or renamed), its exception must go too."""
    missing = sorted(rel for rel in KNOWN_EXCEPTIONS if not (ROOT / rel).is_file())
    assert not missing, f"remove from KNOWN_EXCEPTIONS: {missing}"


@pytest.mark.parametrize("planted, caught", [
    ("# ports (REFERENCE §1)", True),
    ('HELP = "the seed\'s 930m"', True),
    ("# seed 002 §7", True),
    ("# see DESIGN.md", True),
    ("# (issue 17, item 15)", True),
    ("# rules: ../shared/charts/README.md", True),
    ("asks the demo guide §7's open question", True),
    ("# each process's hash seed changes the pickle", False),
    ("# create 8.5-10 min (terraform-aws-eks #2203)", False),
    ('"name": "PREFERENCE_POLICY"', False),
    ("# ports (docs/networking.md#ports)", False),
    ("asks the demo guide's open question (docs/demo-guide.md#open-questions)", False),
])
def test_the_check_catches_a_planted_citation(planted, caught):
    assert bool(outside_citations("planted.py", planted)) is caught


@pytest.mark.parametrize("planted, broken", [
    ("# docs/networking.md#ports", False),
    ("# docs/networking.md", False),
    ("# docs/networking.md#no-such-section", True),
    ("# docs/no-such-page.md", True),
    ("# docs/scale-in.md#karpenters-pod-deletion-cost-gate-scenario-c", False),
])
def test_the_check_catches_a_planted_broken_link(planted, broken):
    assert bool(broken_docs_links("planted.py", planted)) is broken


def test_anchor_follows_github():
    assert anchor("930m versus 900m") == "930m-versus-900m"
    assert anchor("Karpenter's pod-deletion-cost gate (scenario C)") == \
        "karpenters-pod-deletion-cost-gate-scenario-c"
    assert anchor("Demo 1: the gateway") == "demo-1-the-gateway"
