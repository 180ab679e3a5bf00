"""The egress bridge: 127.0.0.1:<port> in the sandbox's own loopback, forwarded to the proxy's
Unix socket that brokerd bind-mounted in. The sandbox has no other route out, so the proxy's
allowlist is the whole of its network."""

from __future__ import annotations

import contextlib
import os
import socket
import threading

_CHUNK = 64 * 1024


def start_bridge(proxy_socket: str) -> int:
    """Listen on an ephemeral loopback port, forward each connection to ``proxy_socket`` in
    daemon threads, point the proxy variables at it, and return the port."""
    listener = socket.create_server(("127.0.0.1", 0))
    port: int = listener.getsockname()[1]
    threading.Thread(target=_accept, args=(listener, proxy_socket), daemon=True).start()
    address = f"http://127.0.0.1:{port}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        os.environ[name] = address
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = ""
    return port


def _accept(listener: socket.socket, proxy_socket: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(proxy_socket)
        except OSError:
            client.close()
            upstream.close()
            continue
        _splice(client, upstream)


def _splice(left: socket.socket, right: socket.socket) -> None:
    def close_both() -> None:
        left.close()
        right.close()

    done = threading.Barrier(2, action=close_both)
    try:
        for source, sink in ((left, right), (right, left)):
            threading.Thread(target=_pump, args=(source, sink, done), daemon=True).start()
    except RuntimeError:  # no thread to be had (the uid's process limit): the connection
        done.abort()      # ends at once instead of hanging the tool that opened it
        for end in (left, right):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        close_both()


def _pump(source: socket.socket, sink: socket.socket, done: threading.Barrier) -> None:
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(threading.BrokenBarrierError):  # its other half never started
        done.wait()
