"""The egress proxy keeps a connection to the name it was granted for (pure parts): every later
plain-HTTP request head on it, and the SNI of a tunnel's TLS ClientHello."""

from __future__ import annotations

import ssl

import pytest
from brokerd._egress_http import (
    BadProxyRequest,
    HostChanged,
    RequestStream,
    check_sni,
    client_hello_sni,
    parse_head,
)


def client_hello(server_name: str | None) -> bytes:
    """A real ClientHello, as Python's ssl module (OpenSSL) sends it."""
    outgoing = ssl.MemoryBIO()
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if server_name is None:
        client.check_hostname = False
    tls = client.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def head(host: str, path: str = "/", extra: str = "") -> bytes:
    return f"GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def stream_after(first: bytes) -> tuple[RequestStream, bytes]:
    request = parse_head(first)
    assert request is not None
    stream = RequestStream(request.host, request.port, request.body_length)
    return stream, request.head + stream.feed(request.rest)


# --- plain HTTP: every head ----------------------------------------------------------------


def test_a_second_request_for_another_host_on_the_same_connection_is_refused():
    stream, _ = stream_after(head("docs.example.org"))
    assert stream.feed(head("other.example.org", "/steal")) == b""
    assert stream.refused is not None and "other.example.org" in stream.refused
    assert stream.feed(head("docs.example.org")) == b""  # and nothing after it, ever


def test_a_pipelined_second_request_in_the_first_read_is_refused_and_the_first_kept():
    stream, out = stream_after(head("docs.example.org", "/one") + head("other.example.org"))
    assert out.startswith(b"GET /one HTTP/1.1\r\n") and b"other" not in out
    assert stream.refused is not None


def test_a_later_request_for_the_same_host_is_rewritten_like_the_first():
    stream, _ = stream_after(head("docs.example.org"))
    out = stream.feed(head("Docs.Example.org", "/two", "Host: other.example.org\r\n"))
    assert out.startswith(b"GET /two HTTP/1.1\r\nHost: docs.example.org\r\n")
    assert b"other.example.org" not in out  # the client's own Host header is dropped


def test_a_body_passes_by_its_length_and_cannot_hide_a_head():
    body = head("other.example.org")  # bytes that look like a request, inside a body
    first = head("docs.example.org", extra=f"Content-Length: {len(body)}\r\n") + body
    _, out = stream_after(first)
    assert out.endswith(body)


@pytest.mark.parametrize("chunking", ["whole", "byte at a time"])
def test_the_check_holds_however_the_bytes_arrive(chunking):
    stream, _ = stream_after(head("docs.example.org", extra="Content-Length: 3\r\n"))
    later = b"abc" + head("other.example.org")
    pieces = [later] if chunking == "whole" else [later[i:i + 1] for i in range(len(later))]
    forwarded = b"".join(stream.feed(piece) for piece in pieces)
    assert forwarded == b"abc" and stream.refused is not None


def test_a_chunked_request_body_is_refused():
    with pytest.raises(BadProxyRequest, match="chunked"):
        parse_head(head("docs.example.org", extra="Transfer-Encoding: chunked\r\n"))


@pytest.mark.parametrize("later", [
    b"CONNECT docs.example.org:443 HTTP/1.1\r\n\r\n",  # a tunnel inside a plain connection
    b"GET /two HTTP/1.1\r\nHost: other.example.org\r\n\r\n",  # origin form: Host only
])
def test_a_later_head_the_first_could_not_be_is_refused(later):
    stream, _ = stream_after(head("docs.example.org"))
    assert stream.feed(later) == b"" and stream.refused is not None


# --- CONNECT: the ClientHello's SNI --------------------------------------------------------


def test_the_sni_of_a_real_client_hello_is_read():
    hello = client_hello("docs.example.org")
    assert client_hello_sni(hello) == "docs.example.org"
    assert client_hello_sni(hello[:-1]) is False  # not complete yet
    assert client_hello_sni(hello[:3]) is False


def test_an_sni_naming_another_host_is_refused():
    with pytest.raises(HostChanged, match=r"other\.example\.org"):
        check_sni("docs.example.org", client_hello_sni(client_hello("other.example.org")))


def test_the_granted_name_passes_in_any_case():
    check_sni("docs.example.org", "DOCS.example.org.")


def test_no_sni_passes_only_for_an_ip_literal():
    assert client_hello_sni(client_hello(None)) is None
    check_sni("192.0.2.7", None)
    with pytest.raises(BadProxyRequest, match="names no server"):
        check_sni("docs.example.org", None)


@pytest.mark.parametrize("first", [b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x00\x05\x02abcd",
                                   b"SSH-2.0-OpenSSH_9.2\r\n"])
def test_a_tunnel_that_does_not_open_with_a_client_hello_is_refused(first):
    with pytest.raises(BadProxyRequest):
        client_hello_sni(first)


def test_a_truncated_hello_inside_a_complete_record_is_refused():
    hello = client_hello("docs.example.org")
    cut = hello[:5 + 40]
    record = cut[:3] + (len(cut) - 5).to_bytes(2, "big") + cut[5:]
    with pytest.raises(BadProxyRequest, match="cut short"):
        client_hello_sni(record)
