"""Real peers on loopback for notification tests: an SMTP server (aiosmtpd), an SMTP server that accepts and never
answers (to hold a worker between its lease and its send), and an HTTP webhook receiver."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage

from aiosmtpd.controller import Controller
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Collector:
    def __init__(self):
        self.messages: list[tuple[object, EmailMessage]] = []
        self.arrived = threading.Condition()

    async def handle_DATA(self, server, session, envelope):  # aiosmtpd handler hook
        message = message_from_bytes(envelope.content, policy=policy.default)
        with self.arrived:
            self.messages.append((envelope, message))
            self.arrived.notify_all()
        return "250 Message accepted for delivery"


@dataclass
class SmtpPeer:
    controller: Controller
    collector: _Collector

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.controller.port}"

    @property
    def messages(self) -> list[tuple[object, EmailMessage]]:
        return list(self.collector.messages)

    def wait_for(self, count: int, timeout: float = 30) -> list:
        with self.collector.arrived:
            self.collector.arrived.wait_for(lambda: len(self.collector.messages) >= count, timeout)
        return self.messages

    def stop(self) -> None:
        self.controller.stop()


def start_smtp(port: int | None = None) -> SmtpPeer:
    collector = _Collector()
    controller = Controller(collector, hostname="127.0.0.1", port=port or free_port())
    controller.start()
    return SmtpPeer(controller, collector)


class SilentSmtp:
    """Accepts TCP connections and never sends the SMTP greeting: a client stays in `connect` until killed."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            self.accepted.set()

    def stop(self):
        for conn in self._conns:
            conn.close()
        self.sock.close()


@dataclass
class ReceivedHook:
    headers: dict
    body: bytes


@dataclass
class WebhookReceiver:
    url: str
    requests: list[ReceivedHook] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answers to give, in order (then 200)
    arrived: threading.Condition = field(default_factory=threading.Condition)
    _server: object = None
    _thread: object = None

    def wait_for(self, count: int, timeout: float = 30) -> list[ReceivedHook]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.requests) >= count, timeout)
        return list(self.requests)

    def stop(self):
        self._server.shutdown()
        self._thread.join(timeout=5)


def start_webhook_receiver() -> WebhookReceiver:
    receiver = WebhookReceiver(url="")

    @Request.application
    def application(request: Request) -> Response:
        with receiver.arrived:
            receiver.requests.append(ReceivedHook(dict(request.headers), request.get_data()))
            receiver.arrived.notify_all()
        status = receiver.statuses.pop(0) if receiver.statuses else 200
        return Response("ok", status=status)

    server = make_server("127.0.0.1", 0, application, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_port}/hooks"
    receiver._server = server
    receiver._thread = thread
    return receiver


class HostileReceiver:
    """A webhook receiver written to hurt its sender (issue 33), on a raw socket so nothing buffers for it.

    `drip`: reads the request, then answers one byte per `interval` seconds, forever (a status line that never
    ends). `huge`: answers 200 at once, then streams `size` bytes of body as fast as the sender takes them.
    `sent` counts the bytes it got out; `accepted` is set at the first connection."""

    def __init__(self, mode: str, *, interval: float = 1.0, size: int = 200 * 1024 * 1024):
        self.mode = mode
        self.interval = interval
        self.size = size
        self.sent = 0
        self.accepted = threading.Event()
        self.closed = threading.Event()  # the sender hung up
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hooks"
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, name=f"hostile-{mode}", daemon=True).start()

    def _accept(self):
        while not self._stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            body += chunk

    def _serve(self, conn: socket.socket) -> None:
        self.accepted.set()
        try:
            self._read_request(conn)
            if self.mode == "drip":
                answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" * 1000
                for byte in answer:
                    if self._stopped.wait(self.interval):
                        return
                    conn.sendall(bytes([byte]))
                    self.sent += 1
            else:
                conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {self.size}\r\n\r\n".encode())
                block = b"x" * 65536
                while self.sent < self.size and not self._stopped.is_set():
                    conn.sendall(block)
                    self.sent += len(block)
        except OSError:
            self.closed.set()
        finally:
            conn.close()

    def stop(self):
        self._stopped.set()
        self.sock.close()
