"""The one safe reading of a request's JSON body, shared by the request hook, the MCP transport and `parse_body`.

`read_json_body()` parses the body once per request (the outcome is kept in the WSGI environ) and never lets the
parser's own failures through: text that is not JSON, bytes that are not UTF-8, and nesting deep enough to exhaust
the decoder's recursion (`RecursionError`) or simply deeper than `MAX_DEPTH` all become `BodyNotJson`.

`unstorable_text(value)` finds the first string (object key or value) holding a character PostgreSQL text cannot
store: U+0000, or a lone UTF-16 surrogate (JSON may carry `"\\ud800"`; no UTF-8 encoding exists for it). Both walks
are iterative, so no input can exhaust the stack.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

# Far more than any body this server accepts needs; well below the decoder's recursion limit.
MAX_DEPTH = 64
NUL_MESSAGE = "Text must not contain NUL characters"
SURROGATE_MESSAGE = "Text must not contain lone UTF-16 surrogates"
NOT_JSON_MESSAGE = "Body must be JSON"
TOO_DEEP_MESSAGE = f"Body must be JSON nested at most {MAX_DEPTH} levels deep"

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_CACHE_KEY = "switchboard.json_body"


class BodyNotJson(Exception):
    """The body is not JSON this server will read; `message` says why."""

    def __init__(self, message: str = NOT_JSON_MESSAGE) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class TextProblem:
    """Where (`loc`, a JSON path) the first unstorable string is, and why (`message`, `type`)."""

    loc: tuple
    message: str
    type: str

    def detail(self) -> dict:
        return {"loc": list(self.loc), "msg": self.message, "type": self.type}


EMPTY = object()  # read_json_body() of a request without a body


def read_json_body() -> Any:
    """The parsed body (whatever JSON value it is), `EMPTY` when there is none, or raise `BodyNotJson`.

    The content type is not looked at (callers that require `application/json` check it); reading the body may
    raise Werkzeug's 413 when a streamed body passes MAX_CONTENT_LENGTH.
    """
    cached = request.environ.get(_CACHE_KEY)
    if cached is None:
        cached = request.environ[_CACHE_KEY] = _parse(_body_bytes())
    if isinstance(cached, BodyNotJson):
        raise cached
    return cached


def _body_bytes() -> bytes:
    """The body; 413 when a streamed body (no Content-Length) runs past MAX_CONTENT_LENGTH.

    Werkzeug stops reading a streamed body at the limit but hands back the first `limit` bytes as if they were all
    of it; one more byte from the (server-terminated) input tells a body of exactly the limit from a longer one.
    """
    data = request.get_data(cache=True)
    limit = request.max_content_length
    streamed = request.content_length is None and "wsgi.input_terminated" in request.environ
    if streamed and limit is not None and len(data) >= limit and request.environ["wsgi.input"].read(1):
        raise RequestEntityTooLarge()
    return data


def _parse(raw: bytes) -> Any:
    if not raw:
        return EMPTY
    try:
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return BodyNotJson()
    if _deeper_than(value, MAX_DEPTH):
        return BodyNotJson(TOO_DEEP_MESSAGE)
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _problem_in(text: str) -> str | None:
    match = _UNSTORABLE.search(text)
    if match is None:
        return None
    return "string_nul" if match.group() == "\x00" else "string_surrogate"


def unstorable_text(value: Any, root: tuple = ()) -> TextProblem | None:
    """The first string in parsed JSON or form data (keys included) that PostgreSQL cannot store, else None."""
    stack = [(value, root)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            kind = _problem_in(item)
        elif isinstance(item, dict):
            kind = None
            for key in item:
                if isinstance(key, str) and (kind := _problem_in(key)) is not None:
                    path = (*path, key)
                    break
            else:
                stack.extend(reversed([(child, (*path, key)) for key, child in item.items()]))
        elif isinstance(item, list):
            kind = None
            stack.extend(reversed([(child, (*path, index)) for index, child in enumerate(item)]))
        else:
            kind = None
        if kind is not None:
            message = NUL_MESSAGE if kind == "string_nul" else SURROGATE_MESSAGE
            return TextProblem(path, message, kind)
    return None
