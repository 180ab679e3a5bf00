"""Re-derive every hash of the audit log and name each record that breaks the chain. Pure:
lines in (with the file and line number they came from), BadLinks out.

``check`` reads one file at a time and stops at the first break; it is the common case, so it
works on the bytes as written and decodes no JSON (see its docstring). ``diagnose`` holds the
whole log, parses every record and explains every break:

- edited: a record's hash does not match its content, or (hash recomputed too) the next
  record does not point at it;
- deleted: records are missing before this one (named by their sequence numbers);
- inserted: a record no later record points at and that is not part of the chain;
- reordered: a record on the chain that sits before one it follows;
- malformed: a line that is not a record at all.

Limit: cutting records off the end of the newest file leaves a shorter chain that is still
whole. Compare ``head`` (the last hash and count, printed by ``brokerd audit verify``) with a
value noted earlier to catch that.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from .records import GENESIS, Entry, entry_hash

Problem = Literal["malformed", "edited", "deleted", "inserted", "reordered"]
Line = tuple[str, int, bytes]  # file name, line number (from 1), the line's bytes

# The members every record has, in canonical (sorted) order right after its nested objects:
# hash, kind, prev, seq, with plain members of a name between "kind" and "prev" (a label
# record's path) or between "prev" and "seq" (a refused record's reason and request hash).
# A JSON string cannot hold an unescaped quote, so in a canonical line the last ',"hash":"' is
# the record's own, and the link members follow.
_HASH_KEY = b',"hash":"'
# Every kind a record may have, from the record types themselves: a kind left out here would
# send an honest log to the slow path, and its head would be counted short.
_KINDS = b"|".join(re.escape(get_args(kind.model_fields["kind"].annotation)[0].encode())
                   for kind in get_args(Entry))
# The plain members never take "seq" itself (canonical keys are unique): without that
# look-ahead the loop took seq and time as members, failed at the end of the record and
# backtracked, four times the cost of the rest of the match.
_MEMBER = rb'"[a-z0-9_]+":(?:"(?:[^"\\]|\\.)*"|null|-?[0-9]+|true|false),'
_LINK = re.compile(rb',"hash":"sha256:([0-9a-f]{64})","kind":"(?:' + _KINDS + rb')",'
                   rb'(?:(?!"prev":)' + _MEMBER + rb')*'
                   rb'"prev":"(sha256:[0-9a-f]{64})",'
                   rb'(?:(?!"seq":)' + _MEMBER + rb')*'
                   rb'"seq":([1-9][0-9]{0,18}),')
_HASH_MEMBER = len(b',"hash":"sha256:"') + 64


@dataclass(frozen=True)
class BadLink:
    file: str
    line: int
    seq: int | None
    problem: Problem
    detail: str

    def __str__(self) -> str:
        seq = f" (seq {self.seq})" if self.seq is not None else ""
        return f"{self.file}:{self.line}{seq}: {self.problem}: {self.detail}"


@dataclass(frozen=True)
class Head:
    count: int
    hash: str


@dataclass
class _Node:
    order: int  # position in the concatenated files
    file: str
    line: int
    seq: int
    prev: str
    hash: str
    intact: bool  # the stored hash matches the content


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    seq, prev, digest = body.get("seq"), body.get("prev"), body.get("hash")
    if type(seq) is not int or not isinstance(prev, str) or not isinstance(digest, str):
        return None
    return body


def check(files: Iterable[bytes]) -> tuple[bool, Head]:
    """True and the head when every record of the files (each one's bytes, in log order) links
    to the one before it; False at the first break (then run ``diagnose``).

    brokerd writes each record as the canonical JSON of the record plus ``hash``, so a line
    without its hash member is exactly the canonical JSON the hash was taken of: the bytes are
    hashed as they stand. A line in any other form fails here and ``diagnose`` judges it. (A
    line rewritten in another form with its hash recomputed is no more hidden than one
    rewritten canonically: the next record's ``prev`` catches both.)
    """
    previous, count = GENESIS.encode(), 0
    for data in files:
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()  # the newline that ends the last record
        for raw in lines:
            at = raw.rfind(_HASH_KEY)
            link = _LINK.match(raw, at) if at > 0 else None
            if link is None or link[2] != previous or int(link[3]) != count + 1:
                return False, Head(count, previous.decode())
            digest = hashlib.sha256(raw[:at])
            digest.update(raw[at + _HASH_MEMBER:])
            if digest.hexdigest().encode() != link[1]:
                return False, Head(count, previous.decode())
            previous, count = b"sha256:" + link[1], count + 1
    return True, Head(count, previous.decode())


def diagnose(lines: Iterable[Line]) -> list[BadLink]:
    bad: dict[int, BadLink] = {}  # by order; the first finding for a record stands
    nodes: list[_Node] = []

    def flag(node: _Node, problem: Problem, detail: str) -> None:
        bad.setdefault(node.order, BadLink(node.file, node.line, node.seq, problem, detail))

    for order, (file, number, raw) in enumerate(lines):
        body = _parse(raw)
        if body is None:
            bad[order] = BadLink(file, number, None, "malformed", "not an audit record")
            continue
        node = _Node(order, file, number, body["seq"], body["prev"], body["hash"],
                     entry_hash(body) == body["hash"])
        nodes.append(node)
        if not node.intact:
            flag(node, "edited", "its content does not match its hash")

    by_hash: dict[str, _Node] = {}
    for node in nodes:
        if node.hash in by_hash:
            flag(node, "inserted", f"a copy of the record at {_where(by_hash[node.hash])}")
        else:
            by_hash[node.hash] = node
    chain = _longest_chain(list(by_hash.values()), by_hash, flag)
    on_chain = {id(n) for n in chain}
    for node in nodes:
        if id(node) not in on_chain:
            flag(node, "inserted", "no later record points at it")
    latest = -1
    for node in reversed(chain):  # forward in log order
        if node.order < latest:
            flag(node, "reordered", "it sits before a record it follows")
        latest = max(latest, node.order)
    return [bad[k] for k in sorted(bad)]


def _longest_chain(unique: list[_Node], by_hash: dict[str, _Node], flag: Any) -> list[_Node]:
    """Walk back from every record nothing points at; the longest walk is the log's chain.
    Breaks are flagged only for that walk."""
    referenced = {n.prev for n in unique}
    heads = [n for n in unique if n.hash not in referenced] or unique[-1:]
    best: tuple[list[_Node], list[tuple[_Node, Problem, str]]] = ([], [])
    for head in heads:
        walk = _walk(head, unique, by_hash)
        if len(walk[0]) > len(best[0]):
            best = walk
    for node, problem, detail in best[1]:
        flag(node, problem, detail)
    return best[0]


def _walk(
    head: _Node, unique: list[_Node], by_hash: dict[str, _Node]
) -> tuple[list[_Node], list[tuple[_Node, Problem, str]]]:
    chain: list[_Node] = []
    breaks: list[tuple[_Node, Problem, str]] = []
    seen: set[int] = set()
    node: _Node | None = head
    while node is not None:
        chain.append(node)
        seen.add(id(node))
        if node.prev == GENESIS:
            break
        linked = by_hash.get(node.prev)
        if linked is not None and id(linked) not in seen:
            node = linked
            continue
        # The record this one points at is gone: resume at the nearest earlier record left.
        earlier = [n for n in unique if id(n) not in seen and n.seq < node.seq]
        resume = max(earlier, key=lambda n: n.seq, default=None)
        if resume is not None and resume.seq == node.seq - 1:
            breaks.append((resume, "edited", "the next record points at a different hash"))
        else:
            first = resume.seq + 1 if resume is not None else 1
            breaks.append((node, "deleted", f"records {first}..{node.seq - 1} before it are missing"
                           if first < node.seq - 1 else f"record {first} before it is missing"))
        node = resume
    return chain, breaks


def _where(node: _Node) -> str:
    return f"{node.file}:{node.line}"
