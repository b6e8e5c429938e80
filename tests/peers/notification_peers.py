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
