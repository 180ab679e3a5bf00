"""docs/inference-contract.md as ``bxctl verify-device`` writes it (pure: results in, text out).

Sections, each always present: Machine, Model and server, Verdicts, Measurements, Contract
checks, On-device conversation. Every figure has a numeric value and the requests that produced
it; the command line that ran them heads the document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .measure import Figure, value_text
from .verdicts import Verdict

SECTIONS = ("Machine", "Model and server", "Verdicts", "Measurements", "Contract checks",
            "On-device conversation")


@dataclass(frozen=True, kw_only=True)
class Outcome:
    command: str
    date: str
    machine: Sequence[tuple[str, str]]
    server: Sequence[tuple[str, str]]
    verdicts: Sequence[Verdict]
    figures: Sequence[Figure]
    reports: Sequence[tuple[str, str]]  # (the loopd command, its output)
    conversation: Sequence[str]  # the log, one line per record


def _cell(text: str) -> str:
    """One table cell: its pipes escaped, every kind of line break (the server's text may
    carry any) a space."""
    return " ".join(text.replace("|", "\\|").splitlines())


def render(outcome: Outcome) -> str:
    rows = {
        "Machine": ["| | |", "|---|---|",
                    *(f"| {_cell(k)} | {_cell(v)} |" for k, v in outcome.machine)],
        "Model and server": ["| | |", "|---|---|",
                             *(f"| {_cell(k)} | {_cell(v)} |" for k, v in outcome.server)],
        "Verdicts": ["| Contract item | Verdict | Detail |", "|---|---|---|",
                     *(f"| {_cell(v.item)} | {v.status} | {_cell(v.detail)} |"
                       for v in outcome.verdicts)],
        "Measurements": ["| Figure | Value | Unit | Produced by |", "|---|---|---|---|",
                         *(f"| {_cell(f.name)} | {value_text(f)} | {f.unit} | {_cell(f.how)} |"
                           for f in outcome.figures)],
        "Contract checks": [
            part for command, output in outcome.reports
            for part in (f"`{command}`:", "", "```", output.strip() or "(no output)", "```", "")],
        "On-device conversation": [
            "Three `bxctl chat --say` turns against a scratch `loopd serve` (plain, `clock`, "
            "`echo` through `find_tool`, answered by a scratch broker.sock: no brokerd), a loopd "
            "restart, a fourth turn. The session's log:", "",
            "```", *outcome.conversation, "```"],
    }
    broken = [v for v in outcome.verdicts if v.status == "FAIL"]
    summary = (f"**{len(broken)} contract items broken**: "
               + "; ".join(v.item for v in broken) if broken
               else "**Every contract item holds** (or is measured, or not supported, as said).")
    head = [
        "# Inference contract", "",
        f"Written by `bxctl verify-device` on {outcome.date}; every figure below is from this "
        f"one run of:", "", "```", outcome.command, "```", "", summary, "",
    ]
    body = [line for name in SECTIONS for line in (f"## {name}", "", *rows[name], "")]
    return "\n".join(head + body).rstrip() + "\n"
