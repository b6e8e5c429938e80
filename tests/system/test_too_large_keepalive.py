"""A 413 on a keep-alive connection: the answer closes the connection (`Connection: close`) instead of saying
keep-alive and then dropping it, so a client never sends its next request into a dead socket. Over a raw socket
against real servers: the test server (werkzeug) and gunicorn with gunicorn.conf.py."""

from __future__ import annotations

import socket
from contextlib import suppress

from tests.conftest import serving
from tests.services.gateway.test_cancellation import gunicorn_server

LIMIT = 1024 * 1024


def _exchange(base_url: str, body_size: int, rounds: int = 1) -> list[bytes]:
    """POST an oversized body (all of it, as a client does), read the answer, then try a second request on the same
    connection; returns the raw answers (the second is b"" when the server closed the connection)."""
    host, port = base_url.removeprefix("http://").split("/", 1)[0].split(":")
    answers = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = (
            f"POST /api/companies HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {body_size}\r\nConnection: keep-alive\r\n\r\n"
        ).encode()
        # The server may answer and stop reading before the whole body is sent.
        with suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head + b"x" * body_size)
        answers.append(_read_answer(sock))
        try:
            sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            answers.append(_read_answer(sock))
        except (BrokenPipeError, ConnectionResetError):
            answers.append(b"")
    return answers


def _read_answer(sock: socket.socket) -> bytes:
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        return head + b"\r\n\r\n" + rest
    except (ConnectionResetError, TimeoutError):
        return data


def _headers(answer: bytes) -> dict[str, str]:
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in head)}


def _assert_closes_honestly(
    base_url: str, keeps_alive: bool, sizes=(LIMIT + 1, 2 * LIMIT, 8 * LIMIT)
) -> None:
    for size in sizes:
        too_large, after = _exchange(base_url, size)
        assert too_large.startswith(b"HTTP/1.1 413 "), too_large[:100]
        assert _headers(too_large)["connection"] == "close", size
        assert after == b"", (
            size
        )  # closed, as announced: the client opens a new connection for its next request
    # A body within the limit keeps the connection where the server keeps any (gunicorn; the test server closes
    # every connection): the next request on it is answered.
    small, after = _exchange(base_url, 10)
    assert not small.startswith(b"HTTP/1.1 413 ")
    assert after.startswith(b"HTTP/1.1 200 ") if keeps_alive else after == b"", after[:100]


def test_the_test_server_closes_after_a_413(app, db):
    with serving(app) as base_url:
        _assert_closes_honestly(base_url, keeps_alive=False, sizes=(2 * LIMIT,))


def test_gunicorn_closes_after_a_413_and_says_so(app, db, tmp_path):
    with gunicorn_server(app, tmp_path, "http://127.0.0.1:9/mcp") as url:
        base_url = url.split("/mcp", 1)[0]
        _assert_closes_honestly(base_url, keeps_alive=True)
        # Thirty in a row, as the measurement: each 413 says close, and a new connection always works.
        for _ in range(30):
            too_large, _after = _exchange(base_url, 2 * LIMIT)
            assert _headers(too_large)["connection"] == "close"
