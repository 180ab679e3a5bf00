"""The identity edits of the memory tool, as pure functions: current text and arguments in, the
new text and what leaves the file out, or WriteRefused with a reason the model can act on.

An identity file is a list of entries separated by a line holding only ``§``. ``replace`` and
``remove`` name their entry by a substring that must occur in exactly one entry. What leaves the
file (a removed or replaced entry, the old wording of a rewritten one, a moved one) is returned
as pending notes: nothing is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from bxcore.memory_tool import ENTRY_SEPARATOR, join_entries, split_entries
from bxcore.sanitizer import Refused, check

from .arguments import AddArgs, ConsolidateArgs, RemoveArgs, ReplaceArgs
from .errors import WriteRefused
from .journal import PendingNote
from .layout import IDENTITY_LIMITS

IdentityArgs = AddArgs | ReplaceArgs | RemoveArgs | ConsolidateArgs


@dataclass(frozen=True, kw_only=True)
class IdentityChange:
    file: str
    before: str
    after: str
    summary: str
    pending: tuple[PendingNote, ...] = ()


def sanitized(text: str, what: str = "text") -> str:
    """``text`` stripped, if the sanitizer accepts it; WriteRefused naming the problem if not."""
    verdict = check(text)
    if isinstance(verdict, Refused):
        raise WriteRefused(f"{what} refused by the sanitizer: {verdict.describe()}")
    stripped = text.strip()
    if any(line.strip() == ENTRY_SEPARATOR for line in stripped.splitlines()):
        raise WriteRefused(f"{what} may not contain a line holding only {ENTRY_SEPARATOR}")
    if not stripped:
        raise WriteRefused(f"{what} is empty")
    return stripped


def plan_identity_edit(args: IdentityArgs, before: str) -> IdentityChange:
    entries = split_entries(before)
    if isinstance(args, AddArgs):
        text = sanitized(args.text)
        change = _change(args.file, before, [*entries, text], f"add: {text[:60]}")
    elif isinstance(args, ReplaceArgs):
        index = _find(entries, args.old_text, args.file)
        text = sanitized(args.text)
        new = [*entries[:index], text, *entries[index + 1 :]]
        change = _change(
            args.file, before, new, f"replace entry {index}: {text[:60]}",
            (PendingNote(kind="dropped", text=entries[index]),),
        )
    elif isinstance(args, RemoveArgs):
        index = _find(entries, args.old_text, args.file)
        change = _change(
            args.file, before, entries[:index] + entries[index + 1 :], f"remove entry {index}",
            (PendingNote(kind="dropped", text=entries[index]),),
        )
    else:
        change = _consolidate(args, before, entries)
    _check_limit(change, consolidating=isinstance(args, ConsolidateArgs))
    return change


def _change(
    file: str, before: str, entries: list[str], summary: str,
    pending: tuple[PendingNote, ...] = (),
) -> IdentityChange:
    return IdentityChange(
        file=file, before=before, after=join_entries(entries), summary=summary, pending=pending
    )


def _find(entries: list[str], old_text: str, file: str) -> int:
    matches = [i for i, entry in enumerate(entries) if old_text in entry]
    if not matches:
        raise WriteRefused(f"no entry of {file} contains {old_text[:80]!r}")
    if len(matches) > 1:
        raise WriteRefused(
            f"{len(matches)} entries of {file} contain {old_text[:80]!r} (entries "
            f"{', '.join(map(str, matches))}); quote more of the one you mean"
        )
    return matches[0]


def _consolidate(args: ConsolidateArgs, before: str, entries: list[str]) -> IdentityChange:
    marked = [step.entry for step in args.plan]
    if sorted(marked) != list(range(len(entries))):
        raise WriteRefused(
            f"consolidate must mark every entry of {args.file} exactly once: it has "
            f"{len(entries)} entries (0 to {len(entries) - 1}), the plan marks {marked}"
        )
    kept: list[str] = []
    pending: list[PendingNote] = []
    counts = {"kept": 0, "rewritten": 0, "moved": 0, "dropped": 0}
    for step in args.plan:
        counts[step.fate] += 1
        old = entries[step.entry]
        if (step.text is not None) != (step.fate == "rewritten"):
            raise WriteRefused(f"entry {step.entry}: 'text' goes with 'rewritten' and only with it")
        if step.fate == "kept":
            kept.append(old)
        elif step.fate == "rewritten":
            assert step.text is not None
            kept.append(sanitized(step.text, f"entry {step.entry}'s new text"))
            pending.append(PendingNote(kind="dropped", text=old))
        else:
            pending.append(PendingNote(kind=step.fate, text=old))
    summary = "consolidate: " + ", ".join(f"{n} {fate}" for fate, n in counts.items())
    return _change(args.file, before, kept, summary, tuple(pending))


def _check_limit(change: IdentityChange, *, consolidating: bool) -> None:
    limit = IDENTITY_LIMITS[change.file]
    size = len(change.after.strip())
    if size <= limit:
        return
    hint = (
        "move or drop more entries"
        if consolidating
        else "use the memory tool's consolidate action to make room: mark every entry kept, "
        "rewritten, moved or dropped"
    )
    raise WriteRefused(
        f"{change.file} would be {size:,} characters, over its limit of {limit:,}; {hint}"
    )
