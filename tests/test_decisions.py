"""The decision log stays readable: docs/decisions/ holds one record per decision, each with the
headings Context, Decision and Consequences; its README indexes exactly the records there; every
"Replaces", "Extends" and "Superseded by" line names records that exist, and a superseded record
is listed as such; nothing in the repository points at the notebook the log replaced, or cites
the design documents by a section number a clone does not have: a design point is named by its
heading in docs/design.md, which must exist.

Each check is a pure function of text, shown to catch a broken input before it judges the tree.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_gates import repository_files

ROOT = Path(__file__).resolve().parent.parent
DECISIONS = ROOT / "docs" / "decisions"
DESIGN = ROOT / "docs" / "design.md"
HEADINGS = ["Context", "Decision", "Consequences"]
LINK_LINE = re.compile(r"^(Replaces|Extends|Superseded by):?(.*)$", re.MULTILINE)
RECORD_NAME = re.compile(r"(?:docs/decisions/)?([a-z0-9][a-z0-9-]*\.md)")
INDEX_LINK = re.compile(r"\]\(([^)]+\.md)\)")
# The single-file notebook that docs/decisions/ replaced (spelled in two parts, so that this
# file does not name it).
NOTEBOOK = re.compile(r"\bdecisions" + r"\.md\b")
# The seeds numbered their sections and contract items; a clone has neither document.
SECTION_CITATION = re.compile(
    r"M2b design|M2b's|M1 design|M2a|pre-M1"
    r"|\b(?:brief|design),? sections? \d"
    r"|\bsections? \d+ of the (?:brief|design)"
    r"|\b(?:inference|authority) contract(?: item)? \d"
    r"|\bcontract (?:item )?\d+\b",
    re.IGNORECASE,
)
DESIGN_CITATION = re.compile(r'docs/design\.md,\s+"([^"]+)"')


def heading_problems(text: str) -> list[str]:
    """What is wrong with one record's shape: a title first, then exactly the three headings."""
    problems = []
    if not text.startswith("# "):
        problems.append("the first line is not a '# ' title")
    found = re.findall(r"^## (.+?)\s*$", text, re.MULTILINE)
    if found != HEADINGS:
        problems.append(f"its '## ' headings are {found}, not {HEADINGS}")
    return problems


def link_problems(text: str, present: set[str]) -> list[str]:
    """Records named on a Replaces, Extends or Superseded by line that do not exist."""
    return [f"{kind} names {name}, which is not in docs/decisions/"
            for kind, rest in LINK_LINE.findall(text)
            for name in RECORD_NAME.findall(rest) if name not in present]


def superseded_by(text: str) -> str | None:
    """The record that replaced this one, from its first line under the title."""
    lines = [line for line in text.splitlines()[1:] if line.strip()]
    match = re.match(r"Superseded by (?:docs/decisions/)?([a-z0-9-]+\.md)\.", lines[0]) \
        if lines else None
    return match.group(1) if match else None


def index_problems(readme: str, present: set[str], superseded: set[str]) -> list[str]:
    """The README lists each record once, exactly those present, superseded ones under their own
    heading and no others there."""
    if "\n## Superseded" not in readme:
        return ["the README has no '## Superseded' section"]
    in_force, old = readme.split("\n## Superseded", 1)
    listed = INDEX_LINK.findall(readme)
    problems = [f"{name} is listed twice" for name in sorted(set(listed)) if listed.count(name) > 1]
    problems += [f"{name} is not listed" for name in sorted(present - set(listed))]
    problems += [f"{name} is listed but absent" for name in sorted(set(listed) - present)]
    problems += [f"{name} is superseded but listed as in force"
                 for name in sorted(superseded & set(INDEX_LINK.findall(in_force)))]
    problems += [f"{name} is listed as superseded but is not"
                 for name in sorted(set(INDEX_LINK.findall(old)) - superseded)]
    return problems


def citation_problems(text: str, design_headings: set[str]) -> list[str]:
    """Mentions of the notebook, seeds section numbers, and design.md headings that do not exist."""
    problems = [f"names the old notebook: {m.group(0)!r}" for m in NOTEBOOK.finditer(text)]
    problems += [f"cites the seeds by number: {m.group(0)!r}"
                 for m in SECTION_CITATION.finditer(text)]
    problems += [f"cites docs/design.md's {heading!r}, which is not one of its headings"
                 for heading in DESIGN_CITATION.findall(text)
                 if " ".join(heading.split()) not in design_headings]
    return problems


def design_headings() -> set[str]:
    text = DESIGN.read_text(encoding="utf-8")
    return {match.strip() for match in re.findall(r"^#{1,3} (.+)$", text, re.MULTILINE)}


def records() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8")
            for path in sorted(DECISIONS.glob("*.md")) if path.name != "README.md"}


# --- the checks catch what they are for ---------------------------------------------------------

GOOD = "# A title\n\n## Context\n\nwhy\n\n## Decision\n\nwhat\n\n## Consequences\n\nthen\n"


@pytest.mark.parametrize("text", [
    GOOD.replace("## Consequences", "## Consequence"),
    GOOD.replace("## Decision\n\nwhat\n\n", ""),
    GOOD.replace("# A title\n", "A title\n"),
    GOOD + "\n## Figures\n\nmore\n",
    GOOD.replace("## Context\n\nwhy\n\n## Decision", "## Decision\n\nwhy\n\n## Context"),
])
def test_a_record_without_its_three_headings_in_order_is_caught(text):
    assert heading_problems(GOOD) == []
    assert heading_problems(text) != []


def test_a_link_to_a_missing_record_is_caught_and_a_notebook_heading_is_not_a_link():
    present = {"a.md", "b.md"}
    assert link_problems("# T\n\nReplaces: a.md; docs/decisions/b.md.\n", present) == []
    assert link_problems('# T\n\nReplaces: the notebook\'s "Some heading".\n', present) == []
    assert link_problems("# T\n\nSuperseded by c.md.\n", present) != []
    assert link_problems("# T\n\nExtends: docs/decisions/gone.md (its rules)\n", present) != []
    assert superseded_by("# T\n\nSuperseded by b.md.\n\n## Context\n") == "b.md"
    assert superseded_by(GOOD) is None


def test_an_index_that_differs_from_the_directory_is_caught():
    good = "# D\n\n## In force\n- [a.md](a.md): x\n\n## Superseded\n- [b.md](b.md): y\n"
    assert index_problems(good, {"a.md", "b.md"}, {"b.md"}) == []
    assert index_problems(good, {"a.md", "b.md", "c.md"}, {"b.md"}) != []  # c not listed
    assert index_problems(good, {"a.md"}, set()) != []  # b listed, absent
    assert index_problems(good, {"a.md", "b.md"}, {"a.md", "b.md"}) != []  # a in force
    assert index_problems(good + "- [a.md](a.md): again\n", {"a.md", "b.md"}, {"b.md"}) != []
    assert index_problems(good.replace("## Superseded", "## Old"), {"a.md", "b.md"}, set()) != []


@pytest.mark.parametrize("text", [
    "see docs/" + "decisions.md for why",
    "(M2b design, section 6)",
    "the agent-loop design, section 10, says",
    "per turn (inference contract 8)",
    "Inference contract 10: what a session records",
    "(brief, Authority contract item 6)",
    "the brief section 4 rule",
    "what contract 7's first-byte limit is for",
    '(docs/design.md, "No such heading")',
    'docs/design.md,\n"Pinned slot")',
])
def test_a_citation_a_clone_cannot_follow_is_caught(text):
    assert citation_problems(text, {"Pinned slots"}) != []


def test_the_design_named_by_its_headings_passes():
    text = ('(docs/design.md, "Pinned slots"), docs/design.md,\n"Pinned   slots", '
            "docs/decisions/thinking.md, section 11.4 of containers-nix-systemd.md")
    assert citation_problems(text, {"Pinned slots"}) == []


# --- the repository ------------------------------------------------------------------------------


def test_every_record_has_context_decision_and_consequences():
    found = records()
    assert len(found) > 10, "docs/decisions/ has lost its records"
    problems = {name: p for name, text in found.items() if (p := heading_problems(text))}
    assert problems == {}


def test_every_replaces_extends_and_superseded_line_names_an_existing_record():
    found = records()
    problems = {name: p for name, text in found.items() if (p := link_problems(text, set(found)))}
    assert problems == {}


def test_the_readme_indexes_exactly_the_records_present():
    found = records()
    superseded = {name for name, text in found.items() if superseded_by(text)}
    readme = (DECISIONS / "README.md").read_text(encoding="utf-8")
    assert index_problems(readme, set(found), superseded) == []


def test_nothing_cites_the_old_notebook_or_the_seeds_by_section_number():
    headings = design_headings()
    assert {"Append-only requests", "Authority contract", "The channel protocol"} <= headings
    this_file = Path(__file__).resolve()
    problems = {}
    for path in repository_files():
        if path.resolve() == this_file:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary or unreadable: no citation to find
        if found := citation_problems(text, headings):
            problems[str(path.relative_to(ROOT))] = found
    assert problems == {}
