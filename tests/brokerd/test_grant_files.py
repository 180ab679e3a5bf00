"""Grant files: errors name the file and the key; while a file is broken or refused every call is
denied; fuzzed files never crash brokerd and never widen access; the shipped examples parse."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import pytest
from brokerd.errors import GrantError
from brokerd.grantstore import GrantStore, load_grants, resolve_paths
from brokerd.ownerfiles import ToolReach
from brokerd.policy import CallArguments, decide, parse_grant, path_roots
from brokerd.taint import CLEAN
from brokerd.writeperiods import Period
from brokerd_support import NOW, request, write
from faults.profile import fuzz
from hypothesis import given
from hypothesis import strategies as st

EXAMPLES = Path(__file__).parents[2] / "grants-examples"
HOME = Path("/home/o")


def parse(text: str, name: str = "g.toml"):
    return parse_grant(text, name, home=HOME, resolve=lambda p: p)


@pytest.mark.parametrize(("text", "key"), [
    ('tools = ["fs.read"]\nmode = "sometimes"\nclasses = ["public"]', "g.toml: mode"),
    ('tools = ["fs.read"]\nmode = "auto"', "must list 'classes'"),
    ('tools = ["fs.read"]\nmode = "auto"\nclasses = ["publik"]', "g.toml: classes.0"),
    ('tools = ["fs.read"]\nmode = "auto"\nclasses = ["public"]\ncolour = 1', "g.toml: colour"),
    ('tools = ["*"]\nmode = "auto"\nclasses = ["public"]', "only allowed with mode = 'deny'"),
    ('tools = []\nmode = "deny"', "g.toml: tools"),
    ('tools = ["fs.read"]\nmode = "deny"\n[arguments.path]\npaths = ["notes/**"]',
     "arguments.path.paths.0: a path must be absolute"),
    ('tools = ["fs.read"]\nmode = "deny"\n[arguments.path]\npaths = ["/a/b**"]',
     "arguments.path.paths.0: '**' must be a whole path component"),
    ('tools = ["fs.read"]\nmode = "deny"\n[arguments.q]\npattern = "("',
     "g.toml: arguments.q.pattern"),
    ('tools = ["fs.read"]\nmode = "deny"\n[arguments.q]\n', "arguments.q"),
    ('tools = ["http.fetch"]\nmode = "deny"\n[arguments.url]\nhosts = ["*"]',
     "arguments.url.hosts"),
    ('tools = ["fs.read"]\nmode = "auto"\nclasses = ["public"]\nexpires = 2027-01-01T00:00:00',
     "g.toml: expires"),
    ('tools = ["fs.read"]\nmode = "deny"\n[sandbox]\nhosts = []', "remove [sandbox]"),
    ('tools = ["fs.read"]\nmode = "auto"\nclasses = ["public"]\n[sandbox]\nmounts = [{path="/"}]',
     "sandbox.mounts.0.path: mounting / is never granted"),
    ('tools = ["fs.read"]\nmode = "auto"\nclasses = ["public"]\n[sandbox]\nworkdir = "/tmp"',
     "sandbox.workdir: must be inside one of sandbox.mounts"),
    ('tools = ["fs.read"]\nmode = "auto"\nclasses = ["public"]\n[sandbox.limits]\npids = 0',
     "g.toml: sandbox.limits.pids"),
    ('tools = ["fs.read"\n', "g.toml: not valid TOML"),
])
def test_a_bad_grant_names_the_file_and_the_key(text, key):
    with pytest.raises(GrantError) as caught:
        parse(text)
    assert key in str(caught.value)


def test_a_broken_file_grants_nothing_and_the_others_still_count(tmp_path):
    write(tmp_path, "good.toml", 'tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\n')
    write(tmp_path, "bad.toml", 'tools = ["fs.read"]\nmode = "auto"\nclasses = ["public"]\nx=1')
    write(tmp_path, "README.md", "not a grant")
    found = load_grants(tmp_path)
    assert [g.name for g in found.grants] == ["good"]
    assert len(found.errors) == 1 and "bad.toml: x: unknown key" in str(found.errors[0])


def test_globs_are_matched_after_resolving_the_grants_own_symlinks(tmp_path, monkeypatch):
    real = tmp_path / "data" / "notes"
    real.mkdir(parents=True)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes").symlink_to(real)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write(tmp_path / "grants", "n.toml", 'tools = ["fs.read"]\nmode = "auto"\n'
          'classes = ["public"]\n[arguments.path]\npaths = ["~/notes/**"]\n'
          '[sandbox]\nmounts = [{ path = "~/notes" }]\n')
    (grant,) = load_grants(tmp_path / "grants").grants  # the mount's target names its source
    asked = request("fs.read", json.dumps({"path": str(tmp_path / "home/notes/a.md")}))
    resolved, _ = resolve_paths(json.loads(asked.arguments), path_roots("fs.read", (grant,)))
    assert resolved == {"path": str(real / "a.md")}
    decision = decide(asked, (grant,), arguments=CallArguments.parse(asked.arguments), now=NOW,
                      taint=CLEAN, resolved_paths=resolved, secrets={})
    assert decision.allowed


def test_a_symlink_planted_in_a_granted_directory_does_not_reach_outside(tmp_path, monkeypatch):
    (tmp_path / "notes").mkdir()
    (tmp_path / "secret").write_text("x")
    (tmp_path / "notes" / "innocent.md").symlink_to(tmp_path / "secret")
    notes = str(tmp_path / "notes")
    resolved, read = resolve_paths({"path": str(tmp_path / "notes/innocent.md")},
                                   {"path": ((notes, notes),)})
    assert resolved == {} and read == {"path": (notes, str(tmp_path / "notes/innocent.md"))}


def test_the_example_grants_all_parse():
    found = load_grants(EXAMPLES)
    assert not found.errors, found.errors
    assert {g.name: g.mode for g in found.grants} == {
        "notes-read": "auto", "inbox-write": "ask", "docs-fetch": "auto", "ssh-deny": "deny",
        "ssh-deny-cwd": "deny", "consult": "ask", "tailnet-fetch": "ask", "delegate": "auto"}


def test_a_removed_grant_stops_counting_at_the_next_call(tmp_path):
    path = write(tmp_path, "e.toml", 'tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\n')
    store = GrantStore(tmp_path)
    assert [g.name for g in store.current()] == ["e"]
    path.unlink()
    assert store.current() == ()


# --- fuzzing -------------------------------------------------------------------------------

def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


words = st.sampled_from(["fs.read", "fs.write", "*", "echo", "auto", "ask", "deny", "public",
                         "private", "secret", "~/.ssh/**", "~/**", "/**", "/", "~", "/home/o",
                         "docs.python.org", "*.org", ".*", "**", "path", "url", ""])
scalars = st.one_of(words, st.text(max_size=8), st.integers(-5, 5000), st.booleans())
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(words, inner, max_size=3)), max_leaves=8)
keys = st.sampled_from(["tools", "mode", "classes", "result_class", "allow_untrusted",
                        "expires", "arguments", "sandbox", "mounts", "paths", "hosts",
                        "pattern", "write", "junk"])
grant_tables = st.dictionaries(keys, values, max_size=8)


@fuzz
@given(grant_tables)
def test_fuzzed_grant_structures_only_ever_raise_grant_error(table):
    text = "\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items())
    with contextlib.suppress(GrantError):
        parse(text)


@fuzz
@given(st.text(max_size=300))
def test_fuzzed_text_only_ever_raises_grant_error(text):
    with contextlib.suppress(GrantError):
        parse(text)


SSH_PROBE = request("fs.read", '{"path": "/home/o/.ssh/id_ed25519"}')
PROBES = [SSH_PROBE, request("fs.write", '{"path": "/home/o/x"}'),
          request("echo", '{"text": "hi"}'), request("http.fetch", '{"url": "https://a.b/"}')]
SSH_DENY = parse('tools = ["*"]\nmode = "deny"\n[arguments.path]\npaths = ["~/.ssh/**"]\n',
                 "ssh.toml")


@fuzz
@given(grant_tables)
def test_no_grant_file_widens_access(table):
    """A file that fails to parse grants nothing; one that parses cannot undo a deny."""
    text = "\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items())
    try:
        grants = (SSH_DENY, parse(text, "fuzzed.toml"))
    except GrantError:
        grants = (SSH_DENY,)
    for probe in PROBES:
        resolved = {"path": json.loads(probe.arguments)["path"]} \
            if "path" in probe.arguments else {}
        decision = decide(probe, grants, arguments=CallArguments.parse(probe.arguments),
                          now=NOW, taint=CLEAN, resolved_paths=resolved, secrets={})
        if len(grants) == 1 or probe is SSH_PROBE:
            assert decision.record.verdict == "deny", (text, decision.record)


# What a grant directory may hold: the owner's grants, saved while no call wrote, and files a
# tool could have written (changed while a call that writes ran), broken ones, a deny among them.
OWNER_FILES = {
    "auto": 'tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\nresult_class = "public"\n',
    "deny": 'tools = ["*"]\nmode = "deny"\n[arguments.path]\npaths = ["/vault/**"]\n',
    "broken": 'tools = ["echo"]\nmode = "auto"\nclasses = [\n',
}
# ``*.toml`` entries that are not files: a deny could vanish by becoming one (attack 31n, F2)
NOT_FILES = {
    "dangling symlink": lambda path: path.symlink_to(path.with_name("gone")),
    "directory": lambda path: path.mkdir(),
    "fifo": lambda path: os.mkfifo(path),
}


@given(owners=st.lists(st.sampled_from(sorted(OWNER_FILES) + sorted(NOT_FILES)), max_size=4),
       tools=st.lists(st.sampled_from(["auto", "deny"]), max_size=3))
def test_while_any_grant_file_is_refused_every_call_is_denied(tmp_path_factory, owners, tools):
    """A refused file (broken, or changed while a call that writes ran, a deny too: a tool's
    rewrite may withdraw the owner's deny, attack 31m F3) may have been a deny, which no grant
    may outlive: while any file is refused no grant is in force; otherwise every valid one.
    On the code before, a deny changed during a call was in force beside the owner's grants."""
    directory = tmp_path_factory.mktemp("grants")
    for n, kind in enumerate(owners):
        if kind in NOT_FILES:
            NOT_FILES[kind](directory / f"owner{n}.toml")
        else:
            write(directory, f"owner{n}.toml", OWNER_FILES[kind])
    saved = max((p.lstat().st_ctime_ns for p in directory.iterdir()), default=0)
    for n, kind in enumerate(tools):
        path = directory / f"tool{n}.toml"
        while not path.exists() or path.stat().st_ctime_ns <= saved:  # after the owner's saves
            write(directory, path.name, OWNER_FILES[kind])
    periods = (Period(min((directory / f"tool{n}.toml").stat().st_ctime_ns
                          for n in range(len(tools))), None),) if tools else ()
    store = GrantStore(directory, reach=lambda: ToolReach(periods=periods))
    in_force = {g.name for g in store.current()}
    if tools or {"broken", *NOT_FILES} & set(owners):
        assert in_force == set(), (owners, tools)
    else:
        assert in_force == {f"owner{n}" for n in range(len(owners))}, owners


# A deny saved under a name a person reads as ``deny.toml`` and brokerd does not list: the
# suffix in another case, white space or an invisible character in or around the name, or one
# directory down (attack 31o, F3). And names nobody reads so: editors' backups and swap files.
TOML_IN_ANY_CASE = st.tuples(*(st.sampled_from([c, c.upper()]) for c in "toml")).map("".join)
ODD = st.lists(st.sampled_from([" ", "\n", "\t", "\u200b", "\u00a0", "\ufeff", "\u2028"]),
               max_size=2).map("".join)
NOT_GRANTS = ["notes.txt", "deny.toml~", ".deny.toml.swp", "#deny.toml#", "README"]


@given(before=ODD, suffix=TOML_IN_ANY_CASE, within=ODD, at=st.integers(0, 4), after=ODD,
       down=st.booleans(), beside=st.lists(st.sampled_from(NOT_GRANTS), max_size=2, unique=True))
def test_a_deny_under_a_name_brokerd_would_not_read_denies_every_call(
        tmp_path_factory, before, suffix, within, at, after, down, beside):
    """A name that reads as ``<name>.toml`` but is not one is refused, naming it, so every call
    is denied until it is renamed; names nobody reads so change nothing."""
    directory = tmp_path_factory.mktemp("grants")
    write(directory, "auto.toml", OWNER_FILES["auto"])
    for name in beside:
        write(directory, name, OWNER_FILES["deny"])
    name = f"{before}deny.{suffix[:at]}{within}{suffix[at:]}{after}"
    down = down or name.endswith(".toml")  # brokerd reads that one where it is
    if down:
        (directory / "sub").mkdir()
    write(directory / "sub" if down else directory, name, OWNER_FILES["deny"])
    wrong = directory / "sub" if down else directory / name
    with pytest.raises(GrantError, match=re.escape("not '<name>.toml' exactly")) as refused:
        load_grants(directory)
    assert repr(str(wrong)) in str(refused.value)
    assert GrantStore(directory).current() == ()
    if not down:
        wrong.rename(directory / "renamed.txt")
        assert {g.name for g in GrantStore(directory).current()} == {"auto"}
