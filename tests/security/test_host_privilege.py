"""Escapes, class 1: a tool never holds a uid privileged on the host.

The attack the review confirmed: as root, a ``shell.run`` call wrote
``/proc/sys/kernel/core_pattern`` (the classic route to code running as host root). Run here in
every configuration (brokerd as root and as an unprivileged user; bubblewrap, podman and a
podman service), the same program tries that and its relatives: another kernel setting, a
nested user namespace (where it would be root again), the mount API, and filling a tmpfs past
the call's memory limit (issue 17, item 12). Each must fail, and what the tool could write
(its granted directory) must hold only files owned by an unprivileged host uid.
"""

from __future__ import annotations

import json
import stat

from brokerd.sandbox import SandboxLimits
from sandbox.helpers import python, rw, shell, spec

from .calls import Result

ATTACK = r"""
import ctypes, errno, json, os
report = {}

def attempt(name, action):
    try:
        action()
        report[name] = "DONE"
    except OSError as exc:
        report[name] = errno.errorcode.get(exc.errno, str(exc.errno))

def rewrite(path):
    def write():
        with open(path, "r+") as handle:
            current = handle.read()  # the same value back: harmless should it ever succeed
            handle.seek(0)
            handle.write(current)
    return write

attempt("core_pattern", rewrite("/proc/sys/kernel/core_pattern"))
attempt("somaxconn", rewrite("/proc/sys/net/core/somaxconn"))
libc = ctypes.CDLL(None, use_errno=True)

def syscall_result(result):
    if result != 0:
        raise OSError(ctypes.get_errno(), "refused")

attempt("user_namespace", lambda: syscall_result(libc.unshare(0x10000000)))
attempt("mount", lambda: syscall_result(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
attempt("write_root", lambda: open("/planted", "w").close())
attempt("write_dev", lambda: open("/dev/planted", "w").close())

def fill_tmp():
    with open("/tmp/fill", "wb") as handle:
        for _ in range(200):  # 200 MiB into a /tmp of 128 MiB (half the memory limit)
            handle.write(b"\0" * (1024 * 1024))
            handle.flush()
            os.fsync(handle.fileno())

attempt("fill_tmp", fill_tmp)
with open("/proc/self/status") as status:
    fields = dict(line.split(":", 1) for line in status if ":" in line)
report["seccomp"] = fields["Seccomp"].strip()
report["no_new_privs"] = fields["NoNewPrivs"].strip()
report["cap_eff"] = fields["CapEff"].strip()
open(os.path.join(os.environ.get("GRANTED", "."), "made-by-tool"), "w").close()
print("REPORT " + json.dumps(report))
"""


def attack(caller, granted) -> dict[str, str]:
    code = f"import os; os.environ['GRANTED'] = {str(granted)!r}\n" + ATTACK
    call = spec("shell.run", shell(python(code), str(granted)),
                mounts=(rw(granted),), limits=SandboxLimits(memory_mb=256, timeout_s=60.0))
    result: Result = caller.call(call)
    assert result.ok, result.text
    line = next(row for row in result.text.splitlines() if row.startswith("REPORT "))
    return json.loads(line.removeprefix("REPORT "))


def test_kernel_settings_cannot_be_written(caller, granted):
    report = attack(caller, granted)
    assert report["core_pattern"] in ("EACCES", "EROFS", "EPERM"), report
    assert report["somaxconn"] in ("EACCES", "EROFS", "EPERM"), report


def test_no_nested_user_namespace_and_no_mount(caller, granted):
    report = attack(caller, granted)
    # bubblewrap's --disable-userns answers ENOSPC; the seccomp filters EPERM
    assert report["user_namespace"] in ("EPERM", "ENOSPC", "EINVAL"), report
    assert report["mount"] in ("EPERM", "EACCES"), report


def test_a_seccomp_filter_no_capabilities_and_no_new_privileges(caller, granted):
    report = attack(caller, granted)
    assert report["seccomp"] == "2", report  # SECCOMP_MODE_FILTER
    assert report["no_new_privs"] == "1" and report["cap_eff"] == "0" * 16, report


def test_every_tmpfs_has_a_size_and_the_rest_is_read_only(caller, granted):
    report = attack(caller, granted)
    assert report["fill_tmp"] == "ENOSPC", report
    assert report["write_root"] in ("EROFS", "EACCES"), report
    assert report["write_dev"] in ("EROFS", "EACCES"), report


def test_what_the_tool_wrote_belongs_to_an_unprivileged_host_uid(caller, granted):
    attack(caller, granted)
    made = granted / "made-by-tool"
    owner = made.stat().st_uid
    assert owner == caller.uid and owner != 0
    # nothing outside the grant changed: the granted directory holds only that file
    assert sorted(p.name for p in granted.iterdir()) == ["made-by-tool"]



SET_ID = r"""
import ctypes, errno, json, os, stat
libc = ctypes.CDLL(None, use_errno=True)
results = {}

def attempt(name, action):
    try:
        action()
        results[name] = "DONE"
    except OSError as exc:
        results[name] = errno.errorcode.get(exc.errno, str(exc.errno))

def raw(number, *args):
    def call():
        if libc.syscall(number, *args) < 0:
            raise OSError(ctypes.get_errno(), "refused")
    return call

here = os.getcwd()
for bits in (0o4755, 0o2755, 0o6755):
    name = f"f{bits:o}"
    open(name, "w").close()
    attempt(f"chmod {bits:o}", lambda: os.chmod(name, bits))
    fd = os.open(name, os.O_RDONLY)
    attempt(f"fchmod {bits:o}", lambda: os.fchmod(fd, bits))
    os.close(fd)
    attempt(f"fchmodat2 {bits:o}", raw(452, -100, name.encode(), bits, 0))
    flags = os.O_CREAT | os.O_WRONLY
    attempt(f"open {bits:o}", lambda: os.close(os.open(f"o{bits:o}", flags, bits)))
    attempt(f"mkdir {bits:o}", lambda: os.mkdir(f"d{bits:o}", bits))
    attempt(f"mknod {bits:o}", lambda: os.mknod(f"n{bits:o}", stat.S_IFREG | bits))
    how = ctypes.create_string_buffer(24)  # struct open_how: flags, mode, resolve
    fields = flags.to_bytes(8, "little") + bits.to_bytes(8, "little") + bytes(8)
    ctypes.memmove(how, fields, 24)
    attempt(f"openat2 {bits:o}", raw(437, -100, f"t{bits:o}".encode(), how, 24))
print("REPORT " + json.dumps(results))
"""


def test_no_file_a_tool_leaves_has_a_set_id_bit(caller, granted):
    """Whatever way a tool sets a mode (chmod, fchmod, fchmodat2, open, mkdir, mknod, openat2),
    nothing it leaves in its granted directory is set-user-ID or set-group-ID: such a program
    would run with the tool's uid for whoever executes it on the host (the fourth attack on
    issue 31), and an unprivileged brokerd's tools run as brokerd's own uid."""
    call = spec("shell.run", shell(python(SET_ID), str(granted)), mounts=(rw(granted),),
                limits=SandboxLimits(memory_mb=256, timeout_s=60.0))
    result: Result = caller.call(call)
    assert result.ok, result.text
    report = json.loads(next(row for row in result.text.splitlines()
                             if row.startswith("REPORT ")).removeprefix("REPORT "))
    set_id = [(path.name, oct(path.lstat().st_mode)) for path in granted.rglob("*")
              if path.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)]
    assert set_id == [], (set_id, report)
    assert any(value == "EPERM" for value in report.values()), report  # the filter said no
