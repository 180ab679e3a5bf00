"""The backends' pure parts: which specs are refused, the command lines, and how a finished
process becomes a ToolOutput or a ToolFailure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from brokerd.sandbox import (
    BadSandboxSpec,
    FailureReason,
    Mount,
    PodmanSetup,
    SandboxLimits,
    SandboxSpec,
    SandboxUnavailable,
    ToolFailure,
    ToolOutput,
)
from brokerd.sandbox._call import CallWorkspace, Pin, check_spec, toolkit_args
from brokerd.sandbox._process import Finished, interpret
from brokerd.sandbox.bubblewrap import BECOME, BwrapLayout, _for_version, bwrap_argv
from brokerd.sandbox.podman import (
    no_process_left,
    podman_kill_argv,
    podman_remove_argv,
    podman_run_argv,
    podman_state_argv,
)
from bxcore.secrets import Secret
from bxcore.tools import DataClass

DIGEST = "sha256:" + "ab" * 32
SPEC = SandboxSpec(
    program="fs.read", arguments="{}",
    mounts=(Mount(source=Path("/home/o/notes"), target="/home/o/notes"),
            Mount(source=Path("/home/o/inbox"), target="/home/o/inbox", writable=True)),
    hosts=("docs.python.org",), secrets=(Secret("tok", "v"),), workdir="/home/o/notes",
    limits=SandboxLimits(memory_mb=64, pids=10, timeout_s=2.5, output_cap=100),
    data_class=DataClass.PRIVATE,
)
PINS = (Pin(device=64769, inode=11), Pin(device=64769, inode=12))  # one a mount of SPEC


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"program": "--class"}, "program"),
        ({"program": "fs/read"}, "program"),
        ({"mounts": (Mount(source=Path("/x"), target="/usr/x"),)}, r"mounts\[0\].target"),
        ({"mounts": (Mount(source=Path("/x"), target="/run"),)}, r"mounts\[0\].target"),
        ({"mounts": (Mount(source=Path("/x"), target="/"),)}, r"mounts\[0\].target"),
        ({"mounts": (Mount(source=Path("/x"), target="/a/../etc"),)}, r"mounts\[0\].target"),
        ({"mounts": (Mount(source=Path("/x"), target="/run/secrets/t"),)}, r"mounts\[0\]"),
        ({"mounts": (Mount(source=Path("x"), target="/x"),)}, r"mounts\[0\].source"),
        ({"secrets": (Secret("../tok", "v"),)}, r"secrets\[0\]"),
        ({"workdir": "relative"}, "workdir"),
        ({"limits": SandboxLimits(pids=0)}, "limits"),
    ],
)
def test_specs_no_sandbox_may_run_are_refused_naming_the_field(change, field):
    fields = {"program": "echo", "arguments": "{}", **change}
    with pytest.raises(BadSandboxSpec, match=field):
        check_spec(SandboxSpec(**fields))


def test_the_toolkit_gets_its_context_as_options_not_environment():
    assert toolkit_args(SPEC, PINS) == [
        "fs.read", "--class", "private", "--cap", "100",
        "--root", "/home/o/notes", "--pinned=64769:11:/home/o/notes",
        "--root", "/home/o/inbox", "--pinned=64769:12:/home/o/inbox",
        "--proxy-socket", "/run/egress/proxy.sock",
        "--workdir", "/home/o/notes",
    ]


def test_every_mount_is_pinned_and_one_brokerd_cannot_see_through_a_podman_service_runs_nothing(
        tmp_path):
    """Before: a source brokerd could not see (the appliance's own container) went unpinned,
    and its symlink checks saw nothing there either. Now such a call does not run, and says
    how the owner lets brokerd see the tree."""
    args = toolkit_args(SPEC, PINS)
    assert [a for a in args if a.startswith("--pinned")] == [
        "--pinned=64769:11:/home/o/notes", "--pinned=64769:12:/home/o/inbox"]
    unseen = CallWorkspace(SPEC, tmp_path, owner=None, sees_sources=False, prefix="bx-call-")
    with pytest.raises(SandboxUnavailable, match="grantableTrees"), unseen:
        raise AssertionError("the workspace was made")
    assert list(tmp_path.iterdir()) == []  # nothing of a call that never ran is left


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv) if arg == flag]


def test_bwrap_unshares_everything_and_binds_only_what_was_granted():
    argv = bwrap_argv(SPEC, BwrapLayout(), toolkit_dir=Path("/src/toolkit"),
                      secrets_dir=Path("/dev/shm/c/secrets"), egress_dir=Path("/dev/shm/c/eg"),
                      seccomp_fd=9, pins=PINS, lifeline=7, status_fd=8)
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                 "--new-session", "--clearenv"):
        assert flag in argv
    assert argv[argv.index("--seccomp") + 1] == "9"
    assert ("/proc/sys", "/proc/sys") in _pairs(argv, "--ro-bind")
    assert argv[argv.index("--tmpfs") - 2:argv.index("--tmpfs") + 2] == [
        "--size", str(32 * 1024 * 1024), "--tmpfs", "/tmp"]
    assert argv[argv.index("--chdir") + 1] == "/"
    assert argv[argv.index("/usr/bin/python3") + 1] == "-P"  # the working directory is not
    assert "-I" not in argv  # the working directory is not on sys.path; brokerd is not root
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert ("/home/o/notes", "/home/o/notes") in _pairs(argv, "--ro-bind")
    assert _pairs(argv, "--bind") == [("/home/o/inbox", "/home/o/inbox")]
    assert ("/dev/shm/c/secrets", "/run/secrets") in _pairs(argv, "--ro-bind")
    assert ("/dev/shm/c/eg", "/run/egress") in _pairs(argv, "--ro-bind")
    assert "--share-net" not in argv
    limits = argv[argv.index("/usr/bin/prlimit"):argv.index("/usr/bin/python3")]
    assert limits == ["/usr/bin/prlimit", f"--data={64 * 1024 * 1024}", "--nproc=10",
                      "--cpu=4", "--nofile=256", "--"]
    assert argv[-len(toolkit_args(SPEC, PINS, 7)):] == toolkit_args(SPEC, PINS, 7)


def test_bwrap_without_secrets_or_hosts_binds_neither():
    argv = bwrap_argv(SandboxSpec(program="echo", arguments="{}"), BwrapLayout(),
                      toolkit_dir=Path("/src/toolkit"), secrets_dir=None, egress_dir=None,
                      seccomp_fd=9, pins=(), lifeline=7, status_fd=8)
    targets = [target for _, target in _pairs(argv, "--ro-bind") + _pairs(argv, "--bind")]
    assert targets == ["/usr", "/proc/sys", "/opt/toolkit/toolkit"]


def test_a_root_brokerds_bwrap_makes_no_user_namespace_and_changes_uid_before_the_toolkit():
    argv = bwrap_argv(SPEC, BwrapLayout(), toolkit_dir=Path("/src/toolkit"), secrets_dir=None,
                      egress_dir=None, seccomp_fd=9, pins=PINS, lifeline=7, status_fd=8,
                      run_as=1234)
    assert "--unshare-all" not in argv and "--unshare-user" not in argv
    assert "--disable-userns" not in argv  # bwrap refuses it without a user namespace
    kept = argv[argv.index("--cap-drop"):argv.index("--", argv.index("--cap-drop"))]
    assert kept == ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                    "--cap-add", "CAP_SETPCAP"]
    become = argv.index("-I") - 1
    # one interpreter: it drops to the uid, sets the limits prlimit would, then runs the toolkit
    assert argv[become:] == ["/usr/bin/python3", "-I", "-S", "-B", "-c", BECOME, "1234",
                             str(64 * 1024 * 1024), "10", "4", "256", *toolkit_args(SPEC, PINS, 7)]
    assert "/usr/bin/prlimit" not in argv
    # bwrap would make the parents of a bind target 0700, which the tool could not pass
    opt = argv.index("/opt")
    assert argv[opt - 3:opt + 1] == ["--perms", "0755", "--dir", "/opt"]


def test_podman_runs_the_image_by_digest_with_no_network_and_every_limit():
    setup = PodmanSetup(image=f"localhost/boxmaker/toolkit@{DIGEST}",
                        containers_conf=Path("/c.conf"), storage=("--root", "/r"))
    argv = podman_run_argv(SPEC, setup, name="bx-call-1", secrets_dir=Path("/s"),
                           egress_dir=Path("/e"), seccomp_profile=Path("/p.json"), pins=PINS)
    assert argv[:4] == ["podman", "--root", "/r", "run"]
    for flag in ("--rm", "--network=none", "--pull=never", "--read-only", "--cap-drop=ALL",
                 "--security-opt=no-new-privileges", "--memory=64m", "--pids-limit=10",
                 "--ulimit=nproc=10:10", f"--ulimit=data={64 * 1024 * 1024}:{64 * 1024 * 1024}",
                 "--workdir=/", "--read-only-tmpfs=false", "--user=0:0",
                 "--security-opt=seccomp=/p.json",
                 f"--tmpfs=/tmp:rw,nosuid,nodev,size={32 * 1024 * 1024}",
                 f"--shm-size={32 * 1024 * 1024}", "--name=bx-call-1"):
        assert flag in argv
    assert any(arg.startswith("--tmpfs=/tmp:") for arg in argv)
    assert not any(arg.startswith("--uts") for arg in argv)  # a UTS namespace of its own
    assert "--volume=/home/o/notes:/home/o/notes:ro" in argv
    assert "--volume=/home/o/inbox:/home/o/inbox:rw" in argv
    assert "--volume=/s:/run/secrets:ro" in argv
    image_at = argv.index(setup.image)
    assert argv[image_at + 1:] == toolkit_args(SPEC, PINS)
    # never --force: podman refuses to remove a container that still runs
    assert podman_remove_argv(setup, "bx-call-1") == [
        "podman", "--root", "/r", "rm", "--ignore", "bx-call-1"]


def test_through_a_podman_service_every_command_names_the_service_and_no_local_store():
    setup = PodmanSetup(image=f"localhost/boxmaker/toolkit@{DIGEST}", containers_conf=None,
                        remote="unix:///run/boxmaker/tools/podman.sock")
    remote = ["podman", "--remote", "--url=unix:///run/boxmaker/tools/podman.sock"]
    argv = podman_run_argv(SPEC, setup, name="bx-call-1", secrets_dir=None, egress_dir=None,
                           seccomp_profile=Path("/p.json"), pins=PINS)
    assert argv[:4] == [*remote, "run"]
    # the service's unit has a UTS namespace of its own and may not make another
    assert "--uts=host" in argv
    for command in (podman_remove_argv, podman_kill_argv, podman_state_argv):
        assert command(setup, "bx-call-1")[:3] == remote


def test_a_local_podman_needs_its_containers_conf():
    with pytest.raises(SandboxUnavailable, match="containers_conf"):
        PodmanSetup(image=f"localhost/boxmaker/toolkit@{DIGEST}", containers_conf=None)


@pytest.mark.parametrize("image", ["localhost/boxmaker/toolkit:latest", "toolkit@sha256:abc"])
def test_podman_refuses_an_image_not_named_by_digest(image):
    with pytest.raises(SandboxUnavailable, match="name@sha256"):
        PodmanSetup(image=image, containers_conf=Path("/c.conf"))


def _finished(status=0, stdout=b"", stderr=b"", timed_out=False, overflowed=False) -> Finished:
    return Finished(status=status, stdout=stdout, stderr=stderr, timed_out=timed_out,
                    overflowed=overflowed)


RESULT = json.dumps({"class": "public", "content": "hi", "truncated": False,
                     "untrusted": False}).encode()


def outcome(run: Finished, *, egress: bool = False, label=DataClass.PRIVATE):
    return interpret(run, data_class=label, egress=egress, timeout_s=5.0, stdout_cap=1000)


def test_a_result_is_never_labelled_below_the_grant_and_egress_makes_it_untrusted():
    out = outcome(_finished(stdout=RESULT), egress=True)
    assert out == ToolOutput(content="hi", data_class=DataClass.PRIVATE, untrusted=True,
                             truncated=False)
    assert out.as_response().status == "ok"


@pytest.mark.parametrize(
    ("run", "reason", "detail"),
    [
        (_finished(timed_out=True, status=-9), FailureReason.TIMEOUT, "time limit of 5.0s"),
        (_finished(overflowed=True, status=-9), FailureReason.OUTPUT_CAP, "more than 1000"),
        (_finished(stdout=b"not json"), FailureReason.BAD_OUTPUT, "not json"),
        (_finished(stdout=RESULT + RESULT), FailureReason.BAD_OUTPUT, "not one result"),
        (_finished(stdout=b'{"content": "x"}'), FailureReason.BAD_OUTPUT, "not one result"),
        (_finished(stdout=RESULT.replace(b'"hi"', b"1")), FailureReason.BAD_OUTPUT, "result"),
        (_finished(status=3, stdout=b'{"error": "out of memory", "kind": "oom"}'),
         FailureReason.OUT_OF_MEMORY, "memory limit"),
        (_finished(status=-9), FailureReason.KILLED, "SIGKILL"),
        (_finished(status=137), FailureReason.KILLED, "SIGKILL"),
        (_finished(status=1, stdout=b'{"error": "x: No such file", "kind": "tool"}'),
         FailureReason.EXIT, "x: No such file"),
        (_finished(status=1, stderr=b"bwrap: Can't find source path /nope"),
         FailureReason.EXIT, "exit status 1: bwrap: Can't find source path /nope"),
        (_finished(status=125), FailureReason.EXIT, "exit status 125: (nothing)"),
    ],
)
def test_failures_name_their_reason(run, reason, detail):
    out = outcome(run)
    assert isinstance(out, ToolFailure)
    assert out.reason is reason
    assert detail in out.detail
    response = out.as_response()
    assert (response.status, response.data_class) == ("failed", DataClass.PRIVATE)
    assert response.content.startswith(f"{reason}: ")


@pytest.mark.parametrize(("version", "disable_userns"), [((0, 8, 0), True), ((0, 11, 0), True),
                                                        ((0, 7, 0), False), ((0, 5, 0), False)])
def test_an_older_bubblewrap_runs_without_disable_userns(version, disable_userns):
    layout = _for_version(BwrapLayout(), version)
    assert layout.disable_userns is disable_userns
    argv = bwrap_argv(SPEC, layout, toolkit_dir=Path("/t"), secrets_dir=None, egress_dir=None,
                      seccomp_fd=9, pins=PINS, lifeline=7, status_fd=8)
    assert ("--disable-userns" in argv) is disable_userns
    assert "--seccomp" in argv  # the filter refuses user namespaces either way


def test_a_bubblewrap_that_cannot_size_a_tmpfs_is_refused():
    with pytest.raises(SandboxUnavailable, match=r"0\.4\.1 is too old"):
        _for_version(BwrapLayout(), (0, 4, 1))


@pytest.mark.parametrize(("status", "said", "left"), [
    (0, "exited\n", True), (0, "stopped\n", True), (0, "created\n", True),
    (0, "running\n", False), (0, "stopping\n", False), (0, "paused\n", False),
    (0, "removing\n", False),
    (125, "Error: inspecting object: no such container bx-call-1\n", True),
    (125, "Error: cannot connect to Podman socket\n", False),
    (-1, "timed out", False),
])
def test_a_podman_call_is_over_only_when_podman_says_no_process_is_left(status, said, left):
    """Stopped (conmon recorded PID 1's exit, which comes after its namespace emptied), never
    run, or removed: anything else, an error of podman's included, is still running."""
    assert no_process_left(status, said) is left
