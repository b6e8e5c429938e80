"""JSON text kept serialized and written verbatim into an answer (a cached `tools/list` of thousands of tools).

A cache that holds the text instead of the decoded value keeps one string alive rather than tens of thousands of
dicts and lists (which every full garbage collection of the process walks), and a request that reuses it pays a
string copy instead of serializing the value again.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RawJSON:
    """A JSON value as its serialized text; `dumps` writes the text where the value stands."""

    text: str

    @classmethod
    def of(cls, value: Any) -> RawJSON:
        return cls(json.dumps(value))

    def value(self) -> Any:
        return json.loads(self.text)


def dumps(body: Any) -> str:
    """`json.dumps(body)` with every `RawJSON` inside written as its text."""
    raws: list[str] = []
    # A marker no caller can guess: the body may hold strings a client chose (a request id).
    marker = f"\x00raw-json-{secrets.token_hex(8)}-%d\x00"

    def placeholder(value: Any) -> str:
        if isinstance(value, RawJSON):
            raws.append(value.text)
            return marker % (len(raws) - 1)
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    text = json.dumps(body, default=placeholder)
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(marker % index), raw, 1)
    return text
