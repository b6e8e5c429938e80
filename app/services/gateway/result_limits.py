"""How much of a provider's tool result reaches the agent (issue 33): at most `GATEWAY_RESULT_MAX_CHARS` characters
(about 25k tokens by default), counted over text blocks, other blocks as their JSON and `structuredContent` as its
JSON. What does not fit is left out, and a last text block tells the agent how much was cut and what to do instead.
(A provider's HTTP answer is bounded before this, while it is read: `PROVIDER_MAX_RESPONSE_BYTES`.)"""

from __future__ import annotations

import json
from typing import Any

CUT_NOTE = (
    "[Switchboard cut this result: {cut:,} of its {total:,} characters were left out{structured} (the limit is "
    "{limit:,} characters per result). Ask the tool for less, for example a narrower query or one page at a time.]"
)


def _size(block: dict[str, Any]) -> int:
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        return len(block["text"])
    return len(json.dumps(block, default=str))


def cap_result(result: dict[str, Any], limit: int) -> dict[str, Any]:
    """The result as the agent gets it: unchanged when it fits in `limit` characters, else cut with a note."""
    blocks: list[dict[str, Any]] = list(result.get("content") or [])
    structured = result.get("structuredContent")
    structured_size = len(json.dumps(structured, default=str)) if structured is not None else 0
    total = sum(_size(block) for block in blocks) + structured_size
    if limit <= 0 or total <= limit:
        return result
    budget = limit
    kept: list[dict[str, Any]] = []
    for block in blocks:
        size = _size(block)
        if size <= budget:
            kept.append(block)
            budget -= size
        elif block.get("type") == "text" and budget > 0:
            kept.append({**block, "text": block["text"][:budget]})
            budget = 0
    capped = {key: value for key, value in result.items() if key not in ("content", "structuredContent")}
    structured_note = ""
    if structured is not None:
        if structured_size <= budget:
            capped["structuredContent"] = structured
            budget -= structured_size
        else:
            structured_note = ", structuredContent among them"
    cut = total - (limit - budget)
    note = CUT_NOTE.format(cut=cut, total=total, structured=structured_note, limit=limit)
    capped["content"] = [*kept, {"type": "text", "text": note}]
    return capped
