"""images/ (bximage and the role images) and tests/ (support.llama) are not packages of the
workspace: put them on sys.path for the appliance tests."""

import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]
for _path in (_REPO / "images", _REPO / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


import pytest  # noqa: E402 -- after the path set-up above, which its users' imports need


@pytest.fixture(scope="session")
def booted_machine():
    """The appliance booted once for test_boot.py and test_boot_systemd.py: a Debian root with
    systemd as PID 1 (systemd-nspawn), the module's units, the real llama-server and the fake
    Mattermost on this machine (tests/appliance/boot.py). Imported here, not at the top: only a
    boot test pays for them."""
    import os
    import tempfile
    from contextlib import ExitStack

    from bxctl.stack import load_manifest
    from gateway.mmthread import running_fake
    from support import llama
    from support.testca import make_test_ca

    from . import boot, bootroot
    from .host import NOTE, install
    from .relay import TcpToUnix
    from .stack import Appliance

    cached = bootroot.boot_root()
    work = Path(tempfile.mkdtemp(prefix="bx-h16-boot-", dir="/var/tmp"))
    try:
        with ExitStack() as stack:
            server = stack.enter_context(llama.start_router())
            relay = stack.enter_context(TcpToUnix(server.socket))
            ca = make_test_ca(work / "ca")  # the owner's Mattermost has a private CA
            mattermost = stack.enter_context(running_fake(tls=ca))
            appliance = Appliance(load_manifest(), None, None, relay, mattermost, work, NOTE)  # type: ignore[arg-type]
            appliance.bot = mattermost.add_user("boxmaker", bot=True)
            appliance.owner = mattermost.add_user("owner")
            root = boot.fresh_root(cached, work)
            install(root, appliance, os.environ.get("BOXMAKER_BOOT_RUNTIME", "runc"))
            boot.add_to_trust_store(root, ca.ca)
            booted = stack.enter_context(
                boot.booted(root, f"bx-h16-boot-{os.getpid()}", work / "console.log")
            )
            booted.wait_running()
            yield booted, appliance
    finally:
        boot.remove(work)
