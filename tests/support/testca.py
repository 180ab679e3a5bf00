"""A test certificate authority and one server certificate it signs, made with openssl: for a
fake server on loopback that clients must verify over TLS (https, wss) through a trust store
that holds the CA, as the owner's host holds a private CA for their Mattermost."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.requires import require

DAYS = "2"
CURVE = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")


@dataclass(frozen=True)
class LocalCA:
    ca: Path  # the CA certificate (PEM): what a trust store adds
    certificate: Path  # the server's, for ``ip``
    key: Path  # the server's private key
    ip: str


def _openssl(*argv: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *argv], cwd=cwd, capture_output=True, text=True,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"openssl {argv[0]} failed: {done.stderr}")


def make_test_ca(directory: Path, ip: str = "127.0.0.1") -> LocalCA:
    """A fresh CA in ``directory`` and a server certificate for the IP address ``ip``."""
    require("openssl")
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", *CURVE, "-keyout", "ca.key", "-out", "ca.crt", "-days", DAYS,
             "-subj", "/CN=Boxmaker test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    _openssl("req", "-new", *CURVE, "-keyout", "server.key", "-out", "server.csr",
             "-subj", f"/CN={ip}", cwd=directory)  # fmt: skip
    (directory / "server.ext").write_text(
        f"subjectAltName=IP:{ip}\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n"
    )
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.crt", "-days", DAYS, "-extfile", "server.ext",
             cwd=directory)  # fmt: skip
    return LocalCA(directory / "ca.crt", directory / "server.crt", directory / "server.key", ip)
