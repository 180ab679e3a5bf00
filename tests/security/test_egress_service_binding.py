"""Escapes, class 4: a host grant reaches that service, not whatever shares its address.

The attack the review confirmed: after the first plain-HTTP request head the proxy passed the
bytes raw, so a second request on the same connection could name another Host; after CONNECT
any SNI passed. Both names here resolve to the same local server (a CDN's shared address); the
grant names only one. From inside a real sandbox, in every configuration, the tool pipelines a
request for the other name, and opens a tunnel whose ClientHello names it. Neither may reach
the server, and the proxy records each refusal (its events, which brokerd logs).
"""

from __future__ import annotations

from sandbox.helpers import (
    GRANTED_HOST,
    RECEIVE_ALL,
    REFUSED_HOST,
    python,
    ro,
    shell,
    spec,
    tunnel_script,
)

from .calls import Result

PIPELINED = r"""
import os, socket
proxy = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])
s = socket.create_connection(('127.0.0.1', proxy), timeout=10)
s.sendall({requests!r})
"""


def pipelined(requests: bytes) -> str:
    """Sandbox code sending ``requests`` on one proxy connection, printing all that comes back."""
    return PIPELINED.format(requests=requests) + RECEIVE_ALL + "print(data.decode('latin-1'))\n"


def in_sandbox(caller, granted, port: int, code: str) -> Result:
    call = spec("shell.run", shell(python(code), str(granted)),
                mounts=(ro(granted),), hosts=(f"{GRANTED_HOST}:{port}",))
    result: Result = caller.call(call)
    assert result.ok, result.text
    return result


def get(host: str, port: int, path: str) -> bytes:
    return f"GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


def test_a_second_request_for_another_name_on_the_connection_is_refused(caller, granted,
                                                                        web_server):
    requests = get(GRANTED_HOST, web_server, "/one") + get(REFUSED_HOST, web_server, "/two")
    result = in_sandbox(caller, granted, web_server, pipelined(requests))
    assert f"page /one for {GRANTED_HOST}" in result.text  # the granted request is carried
    assert "page /two" not in result.text
    assert any(REFUSED_HOST in detail for detail in result.refused_egress()), result.egress


def test_an_origin_form_second_request_cannot_slip_a_host_header_past(caller, granted,
                                                                      web_server):
    sneaky = f"GET /two HTTP/1.1\r\nHost: {REFUSED_HOST}\r\n\r\n".encode()
    requests = get(GRANTED_HOST, web_server, "/one") + sneaky
    result = in_sandbox(caller, granted, web_server, pipelined(requests))
    assert "page /two" not in result.text
    assert result.refused_egress(), result.egress


def test_a_tunnel_whose_client_hello_names_another_server_is_refused(caller, granted,
                                                                     web_server):
    result = in_sandbox(caller, granted, web_server,
                        tunnel_script(GRANTED_HOST, web_server, sni=REFUSED_HOST))
    assert "HTTP/1.1 200 Connection Established" in result.text
    assert "UPSTREAM nothing" in result.text  # not one byte reached the server
    assert any(REFUSED_HOST in detail for detail in result.refused_egress()), result.egress


def test_a_tunnel_that_is_not_tls_is_refused(caller, granted, web_server):
    result = in_sandbox(caller, granted, web_server,
                        tunnel_script(GRANTED_HOST, web_server, sni=None))
    assert "UPSTREAM nothing" in result.text
    assert any("TLS" in detail for detail in result.refused_egress()), result.egress


def test_the_granted_name_still_works_both_ways(caller, granted, web_server):
    plain = in_sandbox(caller, granted, web_server, pipelined(
        get(GRANTED_HOST, web_server, "/one") + get(GRANTED_HOST, web_server, "/two")))
    assert f"page /one for {GRANTED_HOST}" in plain.text
    tunnel = in_sandbox(caller, granted, web_server,
                        tunnel_script(GRANTED_HOST, web_server, sni=GRANTED_HOST))
    assert "UPSTREAM answered:" in tunnel.text
    assert not plain.refused_egress() and not tunnel.refused_egress()
