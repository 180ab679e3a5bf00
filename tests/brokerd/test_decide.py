"""``decide``: one row per rule of docs/grants.md. Pure: no files, no clock."""

from __future__ import annotations

import json
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from brokerd.policy import CallArguments, Decision, Grant, decide, parse_grant
from brokerd.taint import CLEAN, Taint
from brokerd_support import NOW, request
from bxcore.secrets import Secret
from bxcore.tools import DataClass, ToolRequest

HOME = Path("/home/o")


def decide_request(req: ToolRequest, grants: tuple[Grant, ...], **context) -> Decision:
    """``decide`` as brokerd calls it: with the call's arguments parsed once beforehand."""
    return decide(req, grants, arguments=CallArguments.parse(req.arguments), **context)


def grant(name: str, text: str) -> Grant:
    return parse_grant(textwrap.dedent(text), f"{name}.toml", home=HOME, resolve=lambda p: p)


NOTES = grant("notes", """
    tools = ["fs.read"]
    mode = "auto"
    classes = ["public", "private"]
    result_class = "private"
    [arguments.path]
    paths = ["~/notes/**"]
    [sandbox]
    mounts = [{ path = "~/notes" }]
""")
NOTES_ASK = grant("notes-ask", """
    tools = ["fs.read"]
    mode = "ask"
    classes = ["public", "private"]
    [arguments.path]
    paths = ["~/notes/**"]
""")
SSH_DENY = grant("ssh", """
    tools = ["*"]
    mode = "deny"
    [arguments.path]
    paths = ["~/.ssh/**"]
""")
ALL_DENY = grant("nothing", """
    tools = ["*"]
    mode = "deny"
""")
HOME_READ = grant("home", """
    tools = ["fs.read"]
    mode = "auto"
    classes = ["public", "private", "secret"]
    [arguments.path]
    paths = ["~/**"]
""")
EXPIRED = grant("old", f"""
    tools = ["fs.read"]
    mode = "auto"
    classes = ["public"]
    expires = {(NOW - timedelta(seconds=1)).isoformat()}
""")
NO_UNTRUSTED = grant("careful", """
    tools = ["fs.write"]
    mode = "auto"
    classes = ["public", "private"]
    allow_untrusted = false
""")
DOCS = grant("docs", """
    tools = ["http.fetch"]
    mode = "auto"
    classes = ["public"]
    result_class = "public"
    [arguments.url]
    hosts = ["docs.python.org", "*.example.org"]
    [sandbox]
    hosts = ["docs.python.org"]
""")
PATTERN = grant("echo", """
    tools = ["echo"]
    mode = "auto"
    classes = ["public"]
    [arguments.text]
    pattern = "[a-z ]{1,20}"
""")
TOKEN = grant("token", """
    tools = ["http.fetch"]
    mode = "auto"
    classes = ["public"]
    [sandbox]
    secrets = ["api_token"]
""")

SECRET_TAINT = Taint(frozenset({DataClass.SECRET}), False)
UNTRUSTED = Taint(frozenset({DataClass.PUBLIC}), True)
PRIVATE = Taint(frozenset({DataClass.PUBLIC, DataClass.PRIVATE}), False)


def url(u: str) -> str:
    return json.dumps({"url": u})


ROWS = [
    # rule, tool, arguments, grants, taint, resolved path, verdict, deciding grant
    ("no grant at all: deny", "fs.read", '{"path": "/home/o/notes/a"}', (), CLEAN,
     "/home/o/notes/a", "deny", None),
    ("a grant for another tool: deny", "fs.write", '{"path": "/home/o/notes/a"}', (NOTES,),
     CLEAN, "/home/o/notes/a", "deny", None),
    ("auto grant, path inside the glob: allow", "fs.read", '{"path": "/home/o/notes/a/b.md"}',
     (NOTES,), CLEAN, "/home/o/notes/a/b.md", "allow", "notes"),
    ("'/**' matches the directory itself", "fs.read", '{"path": "/home/o/notes"}', (NOTES,),
     CLEAN, "/home/o/notes", "allow", "notes"),
    ("path outside the glob: deny", "fs.read", '{"path": "/home/o/other"}', (NOTES,), CLEAN,
     "/home/o/other", "deny", None),
    ("matched after resolving '..'", "fs.read", '{"path": "/home/o/notes/../.ssh/id"}',
     (NOTES,), CLEAN, "/home/o/.ssh/id", "deny", None),
    ("matched after resolving a planted symlink", "fs.read", '{"path": "/home/o/notes/link"}',
     (NOTES,), CLEAN, "/etc/shadow", "deny", None),
    ("a relative path is never resolved: deny", "fs.read", '{"path": "notes/a"}', (NOTES,),
     CLEAN, None, "deny", None),
    ("a path that is not a string: deny", "fs.read", '{"path": ["/home/o/notes/a"]}', (NOTES,),
     CLEAN, None, "deny", None),
    ("a missing constrained argument: deny", "fs.read", '{"file": "/home/o/notes/a"}',
     (NOTES,), CLEAN, None, "deny", None),
    ("ask grant: ask", "fs.read", '{"path": "/home/o/notes/a"}', (NOTES_ASK,), CLEAN,
     "/home/o/notes/a", "ask", "notes-ask"),
    ("ask beats auto", "fs.read", '{"path": "/home/o/notes/a"}', (NOTES, NOTES_ASK), CLEAN,
     "/home/o/notes/a", "ask", "notes-ask"),
    ("deny beats auto", "fs.read", '{"path": "/home/o/.ssh/id"}', (HOME_READ, SSH_DENY), CLEAN,
     "/home/o/.ssh/id", "deny", "ssh"),
    ("'*' deny grant covers every tool", "fs.list", '{"path": "/home/o/.ssh"}', (SSH_DENY,),
     CLEAN, "/home/o/.ssh", "deny", "ssh"),
    ("a deny grant applies whatever the taint", "fs.read", '{"path": "/home/o/.ssh/id"}',
     (HOME_READ, SSH_DENY), SECRET_TAINT, "/home/o/.ssh/id", "deny", "ssh"),
    ("a deny grant's constraint unmet: it does not apply", "fs.read",
     '{"path": "/home/o/notes/a"}', (NOTES, SSH_DENY), CLEAN, "/home/o/notes/a", "allow",
     "notes"),
    ("expired grant: deny", "fs.read", '{"path": "/x"}', (EXPIRED,), CLEAN, "/x", "deny", None),
    ("taint within the classes: allow", "fs.read", '{"path": "/home/o/notes/a"}', (NOTES,),
     PRIVATE, "/home/o/notes/a", "allow", "notes"),
    ("taint outside the classes: deny", "fs.read", '{"path": "/home/o/notes/a"}', (NOTES,),
     SECRET_TAINT, "/home/o/notes/a", "deny", None),
    ("untrusted session, allow_untrusted = false: deny", "fs.write", '{"path": "/x"}',
     (NO_UNTRUSTED,), UNTRUSTED, None, "deny", None),
    ("trusted session, allow_untrusted = false: allow", "fs.write", '{"path": "/x"}',
     (NO_UNTRUSTED,), CLEAN, None, "allow", "careful"),
    ("granted host: allow", "http.fetch", url("https://docs.python.org/3/"), (DOCS,), CLEAN,
     None, "allow", "docs"),
    ("host with port and upper case: allow", "http.fetch", url("HTTPS://Docs.Python.org:443/x"),
     (DOCS,), CLEAN, None, "allow", "docs"),
    ("other host: deny", "http.fetch", url("https://evil.example.com/"), (DOCS,), CLEAN, None,
     "deny", None),
    ("userinfo does not fool the host check", "http.fetch",
     url("https://docs.python.org@evil.com/"), (DOCS,), CLEAN, None, "deny", None),
    ("a backslash makes the host unclear: deny", "http.fetch",
     url("https://evil.com\\@docs.python.org/"), (DOCS,), CLEAN, None, "deny", None),
    ("another scheme: deny", "http.fetch", url("file://docs.python.org/etc/passwd"), (DOCS,),
     CLEAN, None, "deny", None),
    ("'*.domain' allows a subdomain", "http.fetch", url("http://a.b.example.org/"), (DOCS,),
     CLEAN, None, "allow", "docs"),
    ("'*.domain' does not allow the domain itself", "http.fetch", url("http://example.org/"),
     (DOCS,), CLEAN, None, "deny", None),
    ("'*.domain' is not a suffix match", "http.fetch", url("http://evilexample.org/"), (DOCS,),
     CLEAN, None, "deny", None),
    ("pattern matches the whole value: allow", "echo", '{"text": "hello there"}', (PATTERN,),
     CLEAN, None, "allow", "echo"),
    ("pattern must match all of it: deny", "echo", '{"text": "hello; rm -rf"}', (PATTERN,),
     CLEAN, None, "deny", None),
    ("arguments not a JSON object: deny", "echo", '["hello"]', (PATTERN,), CLEAN, None, "deny",
     None),
    ("arguments not JSON: deny", "echo", "{hello", (PATTERN,), CLEAN, None, "deny", None),
    ("memory tools: built-in allow, no grant needed", "recall", '{"query": "x"}', (), CLEAN,
     None, "allow", "builtin:memory"),
    ("memory tools: no grant can deny them", "memory", '{"action": "note", "text": "x"}',
     (ALL_DENY,), SECRET_TAINT, None, "allow", "builtin:memory"),
    ("clock: built-in allow, no grant needed", "clock", "{}", (), CLEAN, None, "allow",
     "builtin:clock"),
    ("clock: no grant can deny it, whatever the taint", "clock", "{}", (ALL_DENY,),
     SECRET_TAINT, None, "allow", "builtin:clock"),
    ("a needed secret that is not available: deny", "http.fetch", url("https://a.b/"),
     (TOKEN,), CLEAN, None, "deny", None),
]


@pytest.mark.parametrize(
    ("rule", "tool", "arguments", "grants", "taint", "resolved", "verdict", "by"),
    ROWS, ids=[r[0] for r in ROWS],
)
def test_rule(rule, tool, arguments, grants, taint, resolved, verdict, by):
    decision = decide_request(
        request(tool, arguments), grants, now=NOW, taint=taint,
        resolved_paths={} if resolved is None else {"path": resolved}, secrets={},
    )
    assert decision.record.verdict == verdict, decision.record.reason
    assert decision.record.grant == by
    assert decision.record.reason


def test_an_allowing_decision_carries_the_grants_sandbox():
    decision = decide_request(request("fs.read", '{"path": "/home/o/notes/a"}'), (NOTES,),
                              now=NOW, taint=CLEAN, secrets={},
                              resolved_paths={"path": "/home/o/notes/a"})
    spec = decision.authorize()
    assert [(str(m.source), m.target, m.writable) for m in spec.mounts] == [
        ("/home/o/notes", "/home/o/notes", False)]
    assert spec.hosts == ()
    assert spec.data_class is DataClass.PRIVATE
    assert spec.arguments == '{"path": "/home/o/notes/a"}'


def test_a_granted_secret_is_carried_when_available():
    token = Secret("api_token", "t0ken")
    decision = decide_request(request("http.fetch", url("https://a.b/")), (TOKEN,), now=NOW,
                              taint=CLEAN, resolved_paths={}, secrets={"api_token": token})
    assert decision.authorize().secrets == (token,)


def test_the_record_names_the_call_and_hashes_its_arguments():
    decision = decide_request(request("echo", '{"text": "hi"}', call=7), (PATTERN,),
                              now=NOW, taint=CLEAN, resolved_paths={}, secrets={})
    record = decision.record
    assert (record.session, record.call, record.tool) == ("s1", 7, "echo")
    assert record.arguments_sha256.startswith("sha256:")


def test_a_denial_says_why_per_grant():
    decision = decide_request(request("fs.read", '{"path": "/home/o/x"}'), (NOTES,),
                              now=NOW, taint=CLEAN, secrets={},
                              resolved_paths={"path": "/home/o/x"})
    assert "notes: argument 'path' is outside the granted paths" in decision.record.reason


def test_a_denial_never_quotes_a_resolved_path_the_model_did_not_give():
    decision = decide_request(request("fs.read", '{"path": "/proc/self/cwd/x"}'), (NOTES,),
                              now=NOW, taint=CLEAN, secrets={},
                              resolved_paths={"path": "/srv/brokerd/x"})
    reason = decision.record.reason
    assert "/srv/brokerd" not in reason
    assert "outside the granted paths once symlinks and '..' are resolved" in reason
