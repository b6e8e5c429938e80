"""Log records as one JSON object a line, each carrying the request id of the request it was written in.

`SWITCHBOARD_LOG_FORMAT=json` installs this on the root logger's handlers (a stderr handler is added when there is
none); `text` (the default) keeps the usual lines. The request id is the one answered in `X-Request-Id`
(`app.web.observability`); outside a request it is absent.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from flask import g, has_request_context

FORMATS = ("text", "json")


class RequestIdFilter(logging.Filter):
    """Puts the current request's id on every record (`record.request_id`, None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = g.get("request_id") if has_request_context() else None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            entry["request_id"] = request_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(log_format: str) -> None:
    if log_format not in FORMATS:
        raise ValueError(f"SWITCHBOARD_LOG_FORMAT must be one of {', '.join(FORMATS)}, not {log_format!r}")
    if log_format != "json":
        return
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
        if root.level == logging.WARNING:
            root.setLevel(logging.INFO)
    for handler in root.handlers:
        handler.setFormatter(JsonFormatter())
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(RequestIdFilter())
