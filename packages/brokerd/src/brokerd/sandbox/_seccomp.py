"""The sandboxes' seccomp filter: what it refuses (pure data), compiled two ways from the same
lists: to the classic BPF program ``bwrap --seccomp FD`` loads (by the system's libseccomp), and
to the OCI profile podman takes (``oci_profile``, ``--security-opt seccomp=<file>``), which
replaces podman's built-in default with the same baseline plus the refusals below.

The baseline is podman's default profile (containers-common's seccomp.json) as it applies to a
process with no capabilities: every x86_64 system call that profile does not allow is refused
here too (``PODMAN_REFUSES``; calls newer than the profile, which it refuses only because it
does not know them yet, such as ``futex_waitv`` or ``fchmodat2``, are left alone). On top of
it (``ALSO_REFUSED``), what that profile leaves to the missing capabilities and this sandbox
should never do at all: the mount API, joining namespaces, the kernel keyring, the kernel log,
sending or receiving a message with its ancillary data (``sendmsg``, ``recvmsg``: the one way a
descriptor passes between processes a PID namespace keeps apart, or outlives them in flight),
and making a user namespace (``unshare``/
``clone`` with ``CLONE_NEWUSER``; ``clone3`` passes its
flags in memory a filter cannot read, so it fails with ENOSYS and the C library falls back to
``clone``). bwrap's ``--disable-userns`` closes user namespaces too; the filter does not rely on
it being there. And no file gets a set-user-ID or set-group-ID bit (``SET_ID_MODE``: a mode
argument holding either is refused; ``openat2`` passes its mode in memory, so it fails with
ENOSYS and the toolkit opens component by component): a program a tool left set-ID in a granted
directory would run with the tool's uid for whoever on the host executes it (the fourth attack
on issue 31), and an unprivileged brokerd's tools run as brokerd's own uid.

A refused call fails with EPERM; the filter's default is to allow. Syscalls of another
architecture (x32, i386) kill the process: libseccomp's default for a filter made for the
native architecture only.

libseccomp is reached through ctypes: Debian ships it with systemd (``libseccomp2``, listed in
scripts/setup), and no Python binding is needed for four functions. The program is compiled
once, when the backend is made, and written into a fresh memfd for every call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import stat
from typing import Any

from .errors import SandboxUnavailable

PODMAN_REFUSES = (
    "_sysctl", "acct", "add_key", "afs_syscall", "bpf", "chroot", "clock_settime",
    "create_module", "delete_module", "fanotify_init", "finit_module", "get_kernel_syms",
    "getpmsg", "init_module", "io_pgetevents", "io_uring_enter", "io_uring_register",
    "io_uring_setup", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load",
    "lookup_dcookie", "migrate_pages", "move_pages", "nfsservctl", "open_by_handle_at",
    "perf_event_open", "process_madvise", "putpmsg", "query_module", "quotactl", "quotactl_fd",
    "request_key", "security", "setdomainname", "sethostname", "settimeofday", "swapoff",
    "swapon", "sysfs", "tuxcall", "uselib", "userfaultfd", "ustat", "vhangup", "vmsplice",
    "vserver",
)  # fmt: skip
ALSO_REFUSED = (
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "setns", "keyctl", "syslog", "name_to_handle_at",
    "reboot",
    # No descriptor crosses from one sandbox to another: over a Unix socket in a mount two
    # calls share, a call could hand another a file it may write, or a tree it reads, past
    # its grant, its labels and its end (attack 31l, F1, F4, F5). A descriptor arrives only
    # in a message's ancillary data, which only these two calls receive; and it is sent only
    # by the other two: one sent into a socket nothing reads stays open until the kernel's
    # collector frees it, after every process of the sandbox is gone, holding a FIFO's data
    # or a lock a later call reads (attack 31n, F1).
    "recvmsg", "recvmmsg", "sendmsg", "sendmmsg",
)  # fmt: skip
CLONE_NEWUSER = 0x10000000
SET_ID_BITS = (stat.S_ISUID, stat.S_ISGID)
# The calls that set a file's mode, and which argument holds it (x86_64 and aarch64 alike).
SET_ID_MODE = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3,
               "creat": 1, "mknod": 1, "mknodat": 2, "mkdir": 1, "mkdirat": 2}
MODE_IN_MEMORY = ("openat2",)
NEW_USER_NAMESPACE = ("unshare", "clone")  # flags in argument 0 on x86_64

_ALLOW = 0x7FFF0000
_CMP_MASKED_EQ = 7


def _errno_action(number: int) -> int:
    return 0x00050000 | (number & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SandboxUnavailable(
            f"bubblewrap backend: libseccomp is not installed ({exc}); scripts/setup installs "
            "libseccomp2") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def compile_filter() -> bytes:
    """The BPF program (struct sock_filter[]) for this machine's architecture."""
    lib = _library()
    context = lib.seccomp_init(_ALLOW)
    if not context:
        raise SandboxUnavailable("bubblewrap backend: seccomp_init failed")
    try:
        for name in (*PODMAN_REFUSES, *ALSO_REFUSED):
            _add(lib, context, _errno_action(errno.EPERM), name)
        new_user = (_ArgCmp * 1)(_ArgCmp(0, _CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
        for name in NEW_USER_NAMESPACE:
            _add(lib, context, _errno_action(errno.EPERM), name, new_user)
        _add(lib, context, _errno_action(errno.ENOSYS), "clone3")
        for name, index in SET_ID_MODE.items():
            for bit in SET_ID_BITS:
                _add(lib, context, _errno_action(errno.EPERM), name,
                     (_ArgCmp * 1)(_ArgCmp(index, _CMP_MASKED_EQ, bit, bit)))
        for name in MODE_IN_MEMORY:
            _add(lib, context, _errno_action(errno.ENOSYS), name)
        return _export(lib, context)
    finally:
        lib.seccomp_release(context)


# OCI names of the native architecture; other architectures' calls are refused by the runtime.
_OCI_ARCH = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}


def oci_profile(machine: str | None = None) -> dict[str, Any]:
    """The same filter as an OCI seccomp profile (podman's ``--security-opt seccomp=``)."""
    machine = machine or platform.machine()
    if machine not in _OCI_ARCH:
        raise SandboxUnavailable(f"podman backend: no seccomp profile for {machine!r}")
    eperm = {"action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}
    new_user = {"index": 0, "value": CLONE_NEWUSER, "valueTwo": CLONE_NEWUSER,
                "op": "SCMP_CMP_MASKED_EQ"}
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": [_OCI_ARCH[machine]],
        "syscalls": [
            {"names": sorted({*PODMAN_REFUSES, *ALSO_REFUSED}), **eperm},
            {"names": list(NEW_USER_NAMESPACE), **eperm, "args": [new_user]},
            {"names": ["clone3", *MODE_IN_MEMORY], "action": "SCMP_ACT_ERRNO",
             "errnoRet": errno.ENOSYS},
            *({"names": [name], **eperm, "args": [{"index": index, "value": bit,
                                                   "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"}]}
              for name, index in SET_ID_MODE.items() for bit in SET_ID_BITS),
        ],
    }


def filter_fd(program: bytes) -> int:
    """A fresh memfd holding ``program``, at offset 0, for one bwrap to read (inheritable)."""
    fd = os.memfd_create("bx-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _add(lib: ctypes.CDLL, context: int, action: int, name: str,
         conditions: ctypes.Array[_ArgCmp] | None = None) -> None:
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:  # __NR_SCMP_ERROR: not a call of this architecture (e.g. vm86 on x86_64)
        return
    count = 0 if conditions is None else len(conditions)
    status = lib.seccomp_rule_add_array(context, action, number, count, conditions)
    if status < 0:
        raise SandboxUnavailable(f"bubblewrap backend: seccomp rule for {name}: "
                                 f"{os.strerror(-status)}")


def _export(lib: ctypes.CDLL, context: int) -> bytes:
    read_end, write_end = os.pipe()
    try:
        status = lib.seccomp_export_bpf(context, write_end)
        os.close(write_end)
        write_end = -1
        if status < 0:
            raise SandboxUnavailable(f"bubblewrap backend: seccomp_export_bpf: "
                                     f"{os.strerror(-status)}")
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
