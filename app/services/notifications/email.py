"""Notification mail: composed with the standard library (`email.message.EmailMessage`), sent with `smtplib`.

`SMTP_URL` names the server: `smtp://host:port` (plain), `smtp+starttls://host:port` (upgrade with STARTTLS) or
`smtps://host:port` (TLS from the start), with optional `user:password@` (percent-encoded). Every connection has a
timeout (`SMTP_TIMEOUT_SECONDS`). The Message-ID is derived from the delivery id, so a receiver can tell a repeat.
"""

from __future__ import annotations

import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any
from urllib.parse import unquote, urlsplit

from flask import current_app

SCHEMES = {"smtp": 25, "smtp+starttls": 587, "smtps": 465}


@dataclass(frozen=True)
class SmtpSettings:
    scheme: str
    host: str
    port: int
    username: str | None
    password: str | None
    timeout: float


def smtp_settings() -> SmtpSettings:
    url = current_app.config.get("SMTP_URL") or ""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise ValueError("SWITCHBOARD_SMTP_URL must be smtp://, smtp+starttls:// or smtps:// with a host")
    return SmtpSettings(
        scheme=parts.scheme,
        host=parts.hostname,
        port=parts.port or SCHEMES[parts.scheme],
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        timeout=float(current_app.config.get("SMTP_TIMEOUT_SECONDS", 10)),
    )


def public_url(endpoint: str, **values: Any) -> str:
    """An absolute link into the app for mail read outside any request (built on PUBLIC_BASE_URL)."""
    base = urlsplit(current_app.config["PUBLIC_BASE_URL"])
    adapter = current_app.url_map.bind(base.netloc, script_name=base.path or "/", url_scheme=base.scheme)
    return adapter.build(endpoint, values, force_external=True)


def _task_line(data: dict) -> str:
    identifier = data.get("issueIdentifier") or "a task"
    title = data.get("issueTitle")
    return f"{identifier} \u201c{title}\u201d" if title else identifier


def _card_link(data: dict) -> str:
    """The card's own place in its task thread."""
    return public_url("board.task", issue_id=data["issueId"]) + f"#item-{data['interactionId']}"


def _everything_waiting() -> str:
    """The line under a card mail's link: the inbox, for everything else addressed to this person."""
    return f"Everything waiting for you: {public_url('inbox.inbox')}"


def compose(event: str, data: dict, *, to_name: str, to_address: str, delivery_id: str) -> EmailMessage:
    """The message for one delivery: subject, plain-text body with the task and a link, no secrets."""
    agent = data.get("agentName") or "An agent"
    identifier = data.get("issueIdentifier") or "a task"
    settings_link = public_url("inbox.notification_settings")
    if event == "connection_intent.created":
        service = data.get("serviceName") or data.get("service") or "a service"
        subject = f"{agent} needs {service} for {identifier}"
        lines = [
            f"{agent} asked you to connect {service} so it can continue the task {_task_line(data)}.",
            "",
            f"Connect it, or answer Not now: {_card_link(data)}",
            _everything_waiting(),
        ]
    elif event == "tool_approval.requested":
        tool = data.get("tool") or "a tool"
        connection = data.get("connectionName") or "a connection"
        subject = f"{agent} asks to call {tool} for {identifier}"
        lines = [
            f"{agent} wants to call {tool} on {connection} for the task {_task_line(data)}.",
            "",
            f"Approve or deny it: {_card_link(data)}",
            _everything_waiting(),
        ]
    elif event == "connection.needs_reauthorization":
        name = data.get("connectionName") or "A connection"
        subject = f"{name} needs you to sign in again"
        link = public_url("apps.permissions", connection_id=data["connectionId"])
        lines = [
            f"The connection {name} stopped working: the provider no longer accepts its sign-in.",
            "Agents cannot use it until you reconnect it.",
            "",
            f"Reconnect it: {link}",
        ]
    else:
        raise ValueError(f"no mail for event {event!r}")
    lines += ["", "--", f"You get this mail from Switchboard. Turn notification email off: {settings_link}"]
    message = EmailMessage()
    message["Subject"] = subject
    message["From"] = current_app.config.get("MAIL_FROM") or "Switchboard <switchboard@localhost>"
    message["To"] = f"{to_name} <{to_address}>" if to_name else to_address
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(idstring=delivery_id, domain="switchboard.notifications")
    message["Auto-Submitted"] = "auto-generated"
    message.set_content("\n".join(lines) + "\n")
    return message


def send(message: EmailMessage) -> None:
    """Send through the configured server; raises on any failure (the worker retries with back-off)."""
    settings = smtp_settings()
    if settings.scheme == "smtps":
        client: smtplib.SMTP = smtplib.SMTP_SSL(
            settings.host, settings.port, timeout=settings.timeout, context=ssl.create_default_context()
        )
    else:
        client = smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout)
    with client:
        if settings.scheme == "smtp+starttls":
            client.starttls(context=ssl.create_default_context())
        if settings.username:
            client.login(settings.username, settings.password or "")
        client.send_message(message)
