"""The README is what a new user needs on the first screen and the first hour: what the lab is,
the commands, deploy, rehearse, destroy, cost and time. Everything else is a docs/ page."""

from __future__ import annotations

import re

from tests.conftest import PROJECT_DIR

README = (PROJECT_DIR / "README.md").read_text()


def test_the_readme_is_short():
    assert len(README.splitlines()) <= 250


def test_the_first_screen_makes_the_virtualenv_and_says_how_big_it_gets():
    first = README.split("\n## ", 1)[0]
    block = first.split("```sh\n", 1)[1].split("```", 1)[0]
    assert block.splitlines()[0] == "python3 -m venv .venv && . .venv/bin/activate"
    assert "about 1.3 GB" in first


def test_the_readme_has_a_section_for_each_step_of_the_first_hour():
    sections = re.findall(r"^## (.+)$", README, re.M)
    steps = ["Commands", "Deploy", "Rehearse", "Destroy", "Cost and time", "More"]
    # In this order; another short section may come between them.
    assert [s for s in sections if s in steps] == steps, sections
    assert len(sections) <= len(steps) + 2, sections


def test_kubectl_is_named_where_a_step_needs_it():
    # Each sh line the README shows that runs kubectl is in a section that says kubectl is needed
    # for it; the rehearsal tool itself does not run kubectl, and the table says so.
    commands = README.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    assert "`kubectl` is needed only for what you type yourself" in commands
    assert "not kubectl" in commands
    for section in README.split("\n## ")[1:]:
        shown = "".join(block.split("```", 1)[0] for block in section.split("```sh\n")[1:])
        if re.search(r"^kubectl ", shown, re.M):
            prose = re.sub(r"```sh\n.*?```", "", section, flags=re.S)
            assert "kubectl" in prose, section.splitlines()[0]


def test_the_moved_sections_are_in_docs():
    for page, heading in [("configuration.md", "## The settings"), ("lab.md", "## Layers"),
                          ("lab.md", "## What destroy cleans up"), ("testing.md", "## Speed"),
                          ("testing.md", "## What the offline models prove"),
                          ("architecture.md", "## Layout")]:
        text = (PROJECT_DIR / "docs" / page).read_text()
        assert f"\n{heading}\n" in text, (page, heading)
        assert f"docs/{page}" in README, page
