"""Escapes, class 2: nothing in a granted directory runs inside the toolkit.

The attack the review confirmed: the toolkit ran ``python3 -m toolkit`` with the call's working
directory first on ``sys.path``, so a ``json.py`` in a granted workdir was imported by the
toolkit itself and forged the call's result. Here every module the toolkit imports by name is
planted in the granted directory, which is also the grant's workdir and writable; each planted
module would leave a mark and print a forged result. In every configuration the call must
return the file's real content and no module may have run.
"""

from __future__ import annotations

import json

import pytest
from sandbox.helpers import rw, spec

# The toolkit's own imports (main, result, fs, beneath, shell, net) and the standard modules
# they pull (ctypes: openat2, imported once the call has moved to its workdir).
SHADOWED = ("json", "argparse", "re", "subprocess", "socket", "base64", "hashlib", "toolkit",
            "typing", "dataclasses", "pathlib", "fnmatch", "urllib", "http", "ssl", "select",
            "threading", "glob", "shutil", "tempfile", "encodings", "ctypes", "beneath")
PLANT = """\
import os, sys
open(os.path.join({granted!r}, "RAN-" + __name__), "w").close()
sys.stdout.write('{{"content": "FORGED", "class": "public", "untrusted": false}}')
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.parametrize("program", ["fs.read", "echo"])
def test_modules_planted_in_the_workdir_never_run(caller, granted, program):
    (granted / "a.txt").write_text("the real content\n")
    for name in SHADOWED:
        (granted / f"{name}.py").write_text(PLANT.format(granted=str(granted)))
    planted = sorted(p.name for p in granted.iterdir())
    arguments = {"path": f"{granted}/a.txt"} if program == "fs.read" else {"text": "hello"}
    result = caller.call(spec(program, json.dumps(arguments), mounts=(rw(granted),),
                              workdir=str(granted)))
    assert result.ok, result.text
    assert "FORGED" not in result.text
    assert result.text == ("the real content\n" if program == "fs.read" else "hello")
    # nothing ran: no mark left, and the granted directory is as the test left it
    assert sorted(p.name for p in granted.iterdir()) == planted
