"""The NixOS module's own units under a real systemd: a Debian root booted with systemd-nspawn
(tests/appliance/boot.py), every role's unit as lib.nix renders it, started by systemd from its
image by digest, and the owner using it with bxctl and no extra flags (issue 16).

The model server (the real llama-server) and the fake Mattermost run on this machine; the booted
root shares its network, so inferproxy and gatewayd reach them on loopback as they would reach
the owner's router and Mattermost, while loopd's container has only lo.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import subprocess
import textwrap
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
import roles as images  # images/ is on sys.path (tests/appliance/conftest.py)
from bximage import build_cached
from consult.support import fake_cloud, grant_text

from . import boot
from .host import (
    CONFIG,
    GRANTABLE,
    INBOX,
    NOTE,
    TURN_WAIT,
    UNITS,
    owner,
    send_frame,
    set_config,
    wait_active,
)
from .nix import REPO, nix_eval, nix_string
from .stack import NOTE_MARKER, ROLES, Appliance, answered_dm

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.real_server,
    pytest.mark.skipif(os.geteuid() != 0, reason="boots a container: needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-container missing"),
    pytest.mark.skipif(shutil.which("debootstrap") is None, reason="debootstrap is missing"),
]

@pytest.fixture(scope="module")
def machine(booted_machine) -> tuple[boot.Machine, Appliance]:
    """The booted appliance (tests/appliance/conftest.py), shared with test_boot_systemd.py."""
    return booted_machine


def test_every_unit_reaches_active_through_ready_from_its_container(machine):
    booted, _ = machine
    for unit in UNITS:
        state = wait_active(booted, unit)
        assert state == "active", f"{unit}: {state}\n{booted.journal(unit)}"
    for role in ROLES:
        shown = booted.systemctl("show", "-p", "Type,NotifyAccess,User", f"boxmaker-{role}")
        assert shown.stdout.split() == ["Type=notify", "NotifyAccess=all",
                                        f"User=boxmaker-{role}"]  # fmt: skip


def test_bxctl_chat_as_the_owner_is_answered_by_the_model_through_inferproxy(machine):
    booted, _ = machine
    done = owner(booted, "bxctl", "chat", "--tool-choice", "none", "--say",
                 "Say hello in one short sentence.")  # fmt: skip
    assert done.returncode == 0, done.stderr + booted.journal("boxmaker-loopd")
    assert done.stdout.strip()


def test_loopds_container_has_only_loopback_and_inferproxys_reaches_the_model(machine):
    """Each daemon's network, read from the kernel (/proc/<pid>/net/dev) as the machine's root."""
    booted, _ = machine

    def interfaces(role: str) -> list[str]:
        found = booted.run("pgrep", "-f", f"^/usr/bin/python3.11 -sB /usr/local/bin/{role} serve")
        assert found.stdout.split(), f"{role} is not running"
        dev = booted.run("cat", f"/proc/{found.stdout.split()[0]}/net/dev").stdout
        return sorted(line.split(":")[0].strip() for line in dev.splitlines()[2:])

    assert interfaces("loopd") == ["lo"]
    assert len(interfaces("inferproxy")) > 1  # the host's network, where the model server is


def use_runtime(booted: boot.Machine, appliance: Appliance, runtime: str) -> None:
    """The containers.conf the module writes for ``runtime``, and the tool runtime restarted
    on it (its unit's hardening unchanged); podman's service says which runtime it uses."""
    boot.Install(booted.root, runtime=runtime).containers_conf()
    assert booted.systemctl("restart", "boxmaker-tools").returncode == 0
    assert wait_active(booted, "boxmaker-tools") == "active", booted.journal("boxmaker-tools")
    named = booted.run("podman", "--remote", f"--url={appliance.manifest.tool_runtime_url()}",
                       "info", "--format", "{{.Host.OCIRuntime.Name}}")  # fmt: skip
    assert named.stdout.strip() == runtime, named.stderr


def tool_results(done: subprocess.CompletedProcess[str]) -> list[dict]:
    events = [json.loads(line).get("event", {}) for line in done.stdout.splitlines()]
    return [e for e in events if e.get("type") == "tool_result"]


@pytest.mark.parametrize("runtime", ["runc", "crun"])  # Debian's podman: runc; NixOS's: crun
def test_a_tool_call_reads_the_owners_granted_file_in_a_fresh_tool_container(machine, runtime):
    booted, appliance = machine
    use_runtime(booted, appliance, runtime)
    session = f"boot-tool-call-{runtime}"
    try:
        done = owner(
            booted, "bxctl", "chat", "--session", session, "--json", "--tool-choice", "required",
            "--tool-choice", "none", "--say",
            f'Use call_tool to run fs.read with the argument "path": "{NOTE}", then tell '
            "me in one sentence what the note is about.",
        )  # fmt: skip
    finally:  # the tests after this one run on the runtime the machine booted with
        use_runtime(booted, appliance, os.environ.get("BOXMAKER_BOOT_RUNTIME", "runc"))
    assert done.returncode == 0, done.stderr
    results = tool_results(done)
    assert [(e["name"], e["class"]) for e in results] == [("fs.read", "private")], (
        results, booted.journal("boxmaker-brokerd"), booted.journal("boxmaker-tools"))
    logs = owner(booted, "sh", "-c", f"cat /var/lib/boxmaker/sessions/{session}/*.jsonl")
    results = [line for line in logs.stdout.splitlines() if '"tool_result"' in line]
    assert NOTE_MARKER in logs.stdout, results  # and the owner (units' group) can read the log


INBOX_GRANT = f"""tools = ["fs.write"]
mode = "ask"
classes = ["public", "private"]
result_class = "private"
[arguments.path]
paths = ["{INBOX}/*.md"]
[sandbox]
mounts = [{{ path = "{INBOX}", write = true }}]
"""


def waiting_approval(booted: boot.Machine, chat: Future) -> tuple[str, str]:
    """(id, listing) of the one call waiting for the owner, as ``bxctl approvals`` shows it."""
    deadline = time.monotonic() + TURN_WAIT
    while time.monotonic() < deadline and not chat.done():
        listed = owner(booted, "bxctl", "approvals")
        assert listed.returncode == 0, listed.stderr
        ids = [line.split()[0] for line in listed.stdout.splitlines()
               if line.split()[1:2] == ["session"]]  # fmt: skip
        if ids:
            assert len(ids) == 1, listed.stdout
            return ids[0], listed.stdout
        time.sleep(2)
    done = chat.result() if chat.done() else None
    log = booted.journal("boxmaker-brokerd")
    raise AssertionError(f"no approval was asked for:\n{done}\n{log}")


def test_an_ask_write_into_the_owners_inbox_lands_after_bxctl_approve(machine):
    """The owner opened ~/inbox to the units' group and listed it in grantableTrees (host.py),
    and grants writes there on approval (grants-examples/inbox-write.toml, with the owner's
    absolute path: ``~`` in a grant is brokerd's home); brokerd re-reads the grants directory
    for every call."""
    booted, _ = machine
    grant = booted.root / "etc/boxmaker/grants/inbox.toml"
    grant.write_text(INBOX_GRANT)
    grant.chmod(0o644)
    landed = booted.root / str(INBOX).lstrip("/")
    with ThreadPoolExecutor(max_workers=1) as pool:
        chat = pool.submit(
            owner, booted, "bxctl", "chat", "--session", "boot-inbox", "--json",
            "--tool-choice", "required", "--tool-choice", "none", "--say",
            f'Use call_tool to run fs.write with the arguments "path": "{INBOX}/herons.md" and '
            '"content": "Forty-one herons this spring.", then say in one sentence what you did.',
        )  # fmt: skip
        approval, listing = waiting_approval(booted, chat)
        assert sorted(landed.iterdir()) == [], "written before the owner approved"
        approved = owner(booted, "bxctl", "approve", approval)
        assert approved.returncode == 0, approved.stderr
        done = chat.result(timeout=TURN_WAIT)
    assert done.returncode == 0, done.stderr
    results = tool_results(done)
    assert [(e["name"], e["class"]) for e in results] == [("fs.write", "private")], (
        results, booted.journal("boxmaker-brokerd"), booted.journal("boxmaker-tools"))
    written = sorted(landed.iterdir())
    assert [path.suffix for path in written] == [".md"], written
    text = owner(booted, "cat", str(INBOX / written[0].name))
    assert text.returncode == 0, text.stderr  # the owner reads what the tool wrote
    lines = [line.strip() for line in text.stdout.splitlines() if line.strip()]
    assert lines and all(line in listing for line in lines), (text.stdout, listing)  # as approved


def test_memoryd_indexes_loopds_sessions_across_uids(machine):
    """memoryd (its own uid) indexed the session loopd (another uid) wrote in the tool-call test
    above; the owner reads the index through the units' group."""
    booted, _ = machine
    query = (
        "import sqlite3\n"
        "db = sqlite3.connect('file:/var/lib/boxmaker/index/recall.sqlite?mode=ro', uri=True)\n"
        "print(db.execute(\"SELECT count(*) FROM documents WHERE session LIKE 'boot-tool-call-%'\""
        ").fetchone()[0])\n"
    )
    done = owner(booted, "python3", "-c", query)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0, booted.journal("boxmaker-memoryd")


@pytest.mark.parametrize("argv", [
    ["bxctl", "audit", "verify"],
    ["bxctl", "taint", "rebuild", "--out", "/home/owner/taint"],
    ["bxctl", "memory", "log"],
    ["bxctl", "approvals"],
    ["bxctl", "doctor"],
])  # fmt: skip
def test_the_owners_maintenance_commands_work_with_no_flags(machine, argv):
    booted, _ = machine
    done = owner(booted, *argv)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


def test_restarting_one_unit_keeps_the_rest_working(machine):
    booted, _ = machine
    assert booted.systemctl("restart", "boxmaker-memoryd").returncode == 0
    assert wait_active(booted, "boxmaker-memoryd") == "active", booted.journal("boxmaker-memoryd")
    for unit in UNITS:
        assert wait_active(booted, unit) == "active", unit
    done = owner(booted, "bxctl", "chat", "--tool-choice", "none", "--say", "Say hi.")
    assert done.returncode == 0, done.stderr


def stored_images(booted: boot.Machine, store: str) -> list[dict]:
    """The images in one unit's rootless podman store, read from its files (as root)."""
    home = booted.root / f"var/lib/boxmaker-podman/{store}/.local/share/containers/storage"
    found = [image for listing in home.glob("*-images/images.json")
             for image in json.loads(listing.read_text())]
    return found


def test_a_second_deploy_leaves_each_store_one_image(machine):
    """Each unit's ExecStartPost= prunes the image a new load replaced: deploy memoryd again
    (a new build of its image, another digest), restart it, one image is left, the new one
    (an image's id is its config's digest)."""
    booted, _ = machine
    for store in [*ROLES, "tools"]:
        assert len(stored_images(booted, store)) == 1, store
    (first,) = stored_images(booted, "memoryd")
    again = dataclasses.replace(images.config_for("memoryd"), labels={
        **images.config_for("memoryd").labels, "org.boxmaker.deploy": "second"})
    built = build_cached(images.entries("memoryd"), again, images.default_cache(),
                         ref="boxmaker-memoryd")
    index = json.loads((built.layout / "index.json").read_text())
    manifest = built.layout / "blobs" / index["manifests"][0]["digest"].replace(":", "/")
    config = json.loads(manifest.read_text())["config"]["digest"].removeprefix("sha256:")
    assert config != first["id"]
    boot.Install(booted.root).image("memoryd", built.layout, built.digest)
    assert booted.systemctl("restart", "boxmaker-memoryd").returncode == 0
    # Active: READY=1 from the container podman ran by the new digest.
    assert wait_active(booted, "boxmaker-memoryd") == "active", booted.journal("boxmaker-memoryd")
    left = stored_images(booted, "memoryd")
    assert [image["id"] for image in left] == [config], (
        f"{[(i['id'][:12], i.get('names')) for i in left]}\n{booted.journal('boxmaker-memoryd')}")


def test_systemd_252_knows_every_key_of_the_units_but_those_listed(machine):
    """A key systemd does not know is logged and ignored: none may be dropped silently."""
    booted, _ = machine
    log = booted.run("journalctl", "-b", "_PID=1", "--no-pager", "-o", "cat").stdout
    unknown = sorted({line.split("'")[1] for line in log.splitlines()
                      if "boxmaker-" in line and "Unknown key name" in line})  # fmt: skip
    assert unknown == sorted(boot.NEWER_THAN_252), log[-3000:]


# --- the owner's memory commands and scheduled jobs (boot-services) ----------------------------

MEMORY_SOCKET = "/run/boxmaker/memory/memory.sock"
OWNERS_MEMORY_SOCKET = "/run/boxmaker/memory-owner/memory-owner.sock"
JOBS_UNITS = REPO / "nixos-modules" / "jobs-units.nix"
def test_the_owners_memory_commands_change_memoryds_state_as_memoryds_user(machine):
    """An identity edit staged by the agent (brokerd's memory call on memory.sock) is listed,
    accepted, undone and reindexed by the owner with no flags; the writes are memoryd's own
    (memory-owner.sock, whose directory admits the owners and no role), so the state stays
    memoryd's user's and writable by no one else."""
    booted, _ = machine
    set_config(booted, "memory", "stage_identity_writes = true")
    assert booted.systemctl("restart", "boxmaker-memoryd").returncode == 0
    assert wait_active(booted, "boxmaker-memoryd") == "active", booted.journal("boxmaker-memoryd")
    entry = "The owner counts herons every spring."
    call = {"request": {"session": "boot-memory-edit", "call": 1, "tool": "memory",
                        "arguments": json.dumps({"action": "add", "file": "memory.md",
                                                 "text": entry})},
            "class": "public", "untrusted": False}  # fmt: skip
    staged = send_frame(booted, "boxmaker-brokerd", MEMORY_SOCKET, "memory_call", call)
    assert "Staged for the owner's review" in staged, staged + booted.journal("boxmaker-memoryd")
    listed = owner(booted, "bxctl", "memory", "log")
    assert listed.returncode == 0 and "[staged]" in listed.stdout, listed.stderr
    # The session is told no edit number (it counts every class's writes); the owner's log has it.
    seq = next(line.split()[0] for line in listed.stdout.splitlines() if "[staged]" in line)
    refused = send_frame(booted, "boxmaker-brokerd", OWNERS_MEMORY_SOCKET, "memory_command",
                         {"command": "accept", "seq": int(seq)})  # fmt: skip
    assert refused.startswith("refused: ") and "Permission denied" in refused, refused

    accepted = owner(booted, "bxctl", "memory", "accept", seq)
    assert accepted.returncode == 0, accepted.stderr
    memory = owner(booted, "cat", "/var/lib/boxmaker/memory/memory.md")
    assert memory.stdout.strip() == entry, memory.stderr
    undone = owner(booted, "bxctl", "memory", "undo", "memory.md")
    assert undone.returncode == 0 and f"undo edit {int(seq) + 1} (accept)" in undone.stdout, (
        undone.stdout + undone.stderr)
    assert owner(booted, "cat", "/var/lib/boxmaker/memory/memory.md").stdout == ""
    reindexed = owner(booted, "bxctl", "reindex")
    assert reindexed.returncode == 0 and reindexed.stdout.startswith("reindexed: "), (
        reindexed.stderr)

    for state in ("/var/lib/boxmaker/memory", "/var/lib/boxmaker/index"):
        foreign = booted.run("find", state, "(", "!", "-user", "boxmaker-memoryd", "-o",
                             "-perm", "/022", ")", "-printf", "%u %m %p\n")  # fmt: skip
        assert foreign.returncode == 0 and foreign.stdout == "", foreign.stdout + foreign.stderr


def test_a_scheduled_job_runs_as_the_owner_with_no_flags(machine):
    """``bxctl job run`` of a job file as the module writes it: a turn on the background slot,
    its answer printed and posted to the owner's DM by gatewayd."""
    booted, appliance = machine
    name = "boot-morning"
    job = {"ask": "Say good morning in one short sentence.", "schedule": "*-*-* 07:30:00",
           "description": "the boot test's job"}  # fmt: skip
    fields = " ".join(f"{key} = {nix_string(value)};" for key, value in job.items())
    text = nix_eval(f"(import {JOBS_UNITS} {{ }}).jobFile {{ {fields} }}")
    (booted.root / f"etc/boxmaker/jobs/{name}.toml").write_text(text)
    booted.run("chown", f"root:{appliance.manifest.group}", f"/etc/boxmaker/jobs/{name}.toml",
               check=True)  # fmt: skip
    booted.run("chmod", "0440", f"/etc/boxmaker/jobs/{name}.toml", check=True)

    done = owner(booted, "bxctl", "job", "run", name)
    assert done.returncode == 0, done.stderr + booted.journal("boxmaker-loopd")
    assert done.stdout.strip()
    assert "sent to the owner in thread" in done.stderr, done.stderr
    posted = [post["message"] for post in appliance.mattermost.posts_by(appliance.bot[0])]
    assert any(f"Job {name}** answered" in message for message in posted), posted


def test_gatewayd_answers_a_dm_over_tls_signed_by_a_ca_the_hosts_trust_store_holds(machine):
    """The fake Mattermost speaks only https and wss, with a certificate of a test CA that is in
    the booted host's trust store and in no image: gatewayd trusts it through the host's bundle,
    which the module mounts into every role with the host's network (SSL_CERT_FILE)."""
    booted, appliance = machine
    assert appliance.mattermost.url.startswith("https://")
    replies = answered_dm(appliance, "Say hello in one short sentence.", boot.BOOT_WAIT,
                          TURN_WAIT)  # fmt: skip
    assert len(replies) == 1 and replies[0]["message"].strip(), booted.journal("boxmaker-gatewayd")
    assert appliance.mattermost.violations() == []


def test_consult_reaches_a_fake_endpoint_through_the_egress_proxy_with_its_credential(machine):
    """The owner configures consult as the module would: the API key as a credential encrypted
    with systemd-creds (LoadCredentialEncrypted= on brokerd's unit), the endpoint in [consult],
    its address in the grants' egress allowlist, a consult grant naming it. The tool container
    reaches the endpoint only through brokerd's per-call egress proxy; the key reaches the
    endpoint and is written nowhere under /var/lib/boxmaker."""
    booted, appliance = machine
    key = "sk-boot-" + secrets.token_hex(12)
    setup = boot.Install(booted.root)
    credential = setup.credential("consult_key", key.encode() + b"\n")
    with fake_cloud() as cloud:
        endpoint = f"http://127.0.0.1:{cloud.port}/v1/chat/completions"
        setup.unit("brokerd", ["127.0.0.1"], {"consult_key": credential},
                   grantable=GRANTABLE)
        config = booted.root / CONFIG.relative_to("/")
        config.write_text(config.read_text() + textwrap.dedent(f"""\
            [consult]
            endpoint = "{endpoint}"
            model = "cloud-model"
            api_key = "consult_key"
            [secrets.consult_key]
            """))
        grant = "/etc/boxmaker/grants/boot-consult.toml"
        (booted.root / grant.lstrip("/")).write_text(grant_text(f"127.0.0.1:{cloud.port}"))
        booted.run("chown", f"root:{appliance.manifest.group}", grant, check=True)
        booted.run("chmod", "0640", grant, check=True)
        assert booted.systemctl("daemon-reload").returncode == 0
        assert booted.systemctl("restart", "boxmaker-brokerd").returncode == 0
        assert wait_active(booted, "boxmaker-brokerd") == "active", (
            booted.journal("boxmaker-brokerd"))

        call = {"session": "boot-consult", "call": 1, "tool": "consult",
                "arguments": json.dumps({"question": "Which colour is the sky?"})}
        answer = send_frame(booted, "boxmaker-loopd", "/run/boxmaker/broker/broker.sock",
                            "tool_call", call)  # fmt: skip
        assert '"status": "ok"' in answer, (answer, booted.journal("boxmaker-brokerd"),
                                            booted.journal("boxmaker-tools"))
        assert [h.get("Authorization") for h in cloud.headers] == [f"Bearer {key}"]
    found = booted.run("grep", "-rlF", key, "/var/lib/boxmaker")
    assert found.returncode == 1 and found.stdout == "", found.stdout  # 1: no file holds it
    journal = booted.run("journalctl", "-b", "--no-pager", "-o", "cat")
    assert key not in journal.stdout


def turn_usage(done: subprocess.CompletedProcess[str]) -> dict:
    """The usage of a ``bxctl chat --json`` turn (its turn_done frame's body)."""
    bodies = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (usage,) = [body["usage"] for body in bodies if "usage" in body]
    return usage


def test_after_a_power_off_and_a_boot_of_the_same_root_the_session_resumes_from_the_cache(
    machine,
):
    """The machine is powered off and the same root booted again (the model server outside it
    keeps running, as the owner's router does): the session resumes, and its next turn reuses
    the prompt the server still holds (cache_n), with no cache loss in the session's log."""
    booted, _ = machine
    session = "boot-resume"
    first = owner(booted, "bxctl", "chat", "--session", session, "--json", "--tool-choice",
                  "none", "--say", "Remember the word kestrel. Say only: noted.")  # fmt: skip
    assert first.returncode == 0, first.stderr
    before = turn_usage(first)

    booted.poweroff()
    again = boot.boot(booted.root, booted.name, booted.log)
    booted.process = again.process  # the later tests use the booted-again machine
    booted.wait_running()
    for unit in UNITS:
        assert wait_active(booted, unit) == "active", f"{unit}\n{booted.journal(unit)}"

    resumed = owner(booted, "bxctl", "chat", "--session", session, "--json", "--tool-choice",
                    "none", "--say", "Which word did I ask you to remember?")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    after = turn_usage(resumed)
    log = owner(booted, "sh", "-c", f"cat /var/lib/boxmaker/sessions/{session}/*.jsonl").stdout
    assert '"cache_loss"' not in log, log
    # The second turn's prompt begins with the whole first exchange: all of what the first
    # turn's prompt left in the slot is reused, the rest is the answer and the new question.
    assert after["cache_n"] >= before["cache_n"] + before["prompt_n"], (before, after)


def test_role_state_is_readable_by_the_owners_and_the_one_role_that_needs_it(machine):
    """Every role's user shares the units' group; each state directory admits only its writer,
    the owners' group and the role that mounts it read-only (memoryd, loopd's sessions)."""
    booted, appliance = machine
    manifest = appliance.manifest
    directories = sorted({s.dir for role in ROLES for s in manifest.roles[role].state})
    probe = " ".join(f"ls /var/lib/boxmaker/{d} >/dev/null 2>&1 && echo {d};" for d in directories)
    for role in ROLES:
        done = booted.run("sh", "-c", probe, user=f"boxmaker-{role}")
        readable = done.stdout.split()
        assert readable == sorted(s.dir for s in manifest.roles[role].state), (role, done.stderr)
    done = owner(booted, "sh", "-c", probe)
    assert done.stdout.split() == directories, done.stderr
