"""Meta tools (issue 32 item 2): when an agent's tools would cost too much context, `tools/list` lists three tools
that reach them instead: `search_tools` (words -> matching tool names with one line each), `describe_tool` (a name
-> its full entry, schemas included) and `call_tool` (a name and arguments -> the tool's result). The tools an
administrator pinned (`ToolPolicy.pinned`, the Permissions page's Pin box) are listed before them by themselves.

The threshold is a setting, by estimated tokens (`GATEWAY_META_TOOLS_ABOVE_TOKENS`, the listing's characters / 4)
or by count (`GATEWAY_META_TOOLS_ABOVE_TOOLS`); 0 turns either off. Search and describe read the agent's own
listing (the cached one, read-only filtered as listed), so they never show a tool a plain listing would hide.
`call_tool` is not a path of its own: the gateway door hands the inner name and arguments to the same `tools/call`
code a direct call takes (`app.web.agents.gateway`), so policy, approvals, trust rules, limits, managed arguments,
activity and the timeline all apply to the underlying tool. A tool can still be called by its own name while meta
tools are listed (a client that kept an older listing).

The search index holds plain strings per tool (no decoded schemas: a process keeps it for thousands of tools) and is
kept per audience, name budget and read-only flag under the access revision, as the listing is.
"""

from __future__ import annotations

import bisect
import heapq
import json
import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from flask import current_app

from app.core.raw_json import RawJSON
from app.services.access.revision import RevisionCache

SEARCH = "search_tools"
DESCRIBE = "describe_tool"
CALL = "call_tool"
NAMES = frozenset((SEARCH, DESCRIBE, CALL))
SEARCH_LIMIT = 10
SEARCH_MAX_LIMIT = 50
SUMMARY_MAX_CHARS = 160
CHARS_PER_TOKEN = 4  # the documented estimate (no tokenizer is installed): tokens ~ characters / 4

_NAME_SCHEMA = {"type": "string", "description": "The tool's exact name, as search_tools gave it."}
DEFINITIONS: list[dict] = [
    {
        "name": SEARCH,
        "description": (
            "Search the tools you can use (there are too many to list) by words: what you want to do, the service, "
            "the object. Answers the best matching tool names, one line each. Then describe_tool for a tool's "
            "arguments, and call_tool to run it."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words describing the tool you need."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": SEARCH_MAX_LIMIT,
                    "description": f"How many tools to answer (default {SEARCH_LIMIT}).",
                },
            },
            "required": ["query"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": DESCRIBE,
        "description": "The full definition of one of your tools: its description and input schema (its arguments).",
        "inputSchema": {"type": "object", "properties": {"name": _NAME_SCHEMA}, "required": ["name"]},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": CALL,
        "description": (
            "Run one of your tools by name with its arguments (see describe_tool). The tool's own rules apply: it "
            "may need approval, or be blocked, exactly as when called directly."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": _NAME_SCHEMA,
                "arguments": {
                    "type": "object",
                    "description": "The tool's arguments, as its input schema says.",
                },
            },
            "required": ["name"],
        },
    },
]
LISTING = RawJSON.of(DEFINITIONS)


def with_pinned(pinned: str) -> RawJSON:
    """The meta listing: the agent's pinned tools' entries (`pinned`, a JSON array's text), then the meta tools."""
    if pinned == "[]":
        return LISTING
    return RawJSON(pinned[:-1] + ", " + LISTING.text[1:])


def estimated_tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN


@dataclass(frozen=True)
class ToolIndex:
    """One agent's listing as plain strings: its tools' names, one line each, their entries' JSON, and what a query
    is matched against: per tool its name's words and all its words, each kind joined in one text (tools apart by a
    newline, which no query word holds) so a word is looked for by one `str.find` pass, not once per tool."""

    names: tuple[str, ...]
    summaries: tuple[str, ...]
    entries: dict[str, str]
    name_text: str
    name_starts: tuple[int, ...]
    words_text: str
    words_starts: tuple[int, ...]

    @classmethod
    def of(cls, listing: RawJSON) -> ToolIndex:
        tools = listing.value()
        names = tuple(tool["name"] for tool in tools)
        name_text, name_starts = _joined(_name_words(name) for name in names)
        words_text, words_starts = _joined(_words_of(tool) for tool in tools)
        return cls(
            names=names,
            summaries=tuple(_summary(tool.get("description")) for tool in tools),
            entries={tool["name"]: json.dumps(tool) for tool in tools},
            name_text=name_text,
            name_starts=name_starts,
            words_text=words_text,
            words_starts=words_starts,
        )


def _joined(texts: Iterable[str]) -> tuple[str, tuple[int, ...]]:
    parts = [text.replace("\n", " ") for text in texts]
    starts, at = [], 0
    for part in parts:
        starts.append(at)
        at += len(part) + 1
    return "\n".join(parts), tuple(starts)


def _summary(description: str | None) -> str:
    line = (description or "").strip().split("\n", 1)[0].strip()
    return line if len(line) <= SUMMARY_MAX_CHARS else line[: SUMMARY_MAX_CHARS - 1] + "…"


def _name_words(name: str) -> str:
    return re.sub(r"[_\-]+", " ", name).lower()


def _words_of(tool: dict) -> str:
    """What a query is matched against: the name (its `_` and `-` as spaces), the title and the description."""
    return " ".join(
        (_name_words(tool["name"]), tool.get("title") or "", tool.get("description") or "")
    ).lower()


INDEX_CACHE_SIZE = 32
_indexes: RevisionCache[ToolIndex] = RevisionCache(INDEX_CACHE_SIZE)


def index_of(key: Hashable, revision: int, listing: RawJSON) -> ToolIndex:
    """The index of `listing` (the agent's, keyed by `key`), kept while the access revision is unchanged."""
    return _indexes.get_or_build(key, revision, lambda: ToolIndex.of(listing))


def clear() -> None:
    _indexes.clear()


def exceeds_threshold(listing: RawJSON, index: Callable[[], ToolIndex]) -> bool:
    """Whether the listing is too large to hand the agent: over the token or the count setting (0: not checked).
    The token estimate reads the listing's text; only a count setting needs the (kept) index."""
    config = current_app.config
    above_tokens = config["GATEWAY_META_TOOLS_ABOVE_TOKENS"]
    above_tools = config["GATEWAY_META_TOOLS_ABOVE_TOOLS"]
    if above_tokens and estimated_tokens(listing.text) > above_tokens:
        return True
    return bool(above_tools and len(index().names) > above_tools)


# Words that say nothing about a tool: matched as substrings they would match nearly every description.
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "out",
        "so",
        "that",
        "the",
        "this",
        "to",
        "up",
        "we",
        "what",
        "which",
        "who",
        "with",
        "you",
        "your",
    ]
)


# Words people use for what tools name otherwise: each query word is also looked for as these (a small, fixed table
# of the verbs tool names use; no stemming library is installed, and a general thesaurus would match too widely).
# A tool matched through a synonym scores as through the word itself, once per query word however many match.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "add": ("create", "new", "insert"),
    "new": ("create",),
    "make": ("create",),
    "post": ("create", "send"),
    "send": ("create", "post"),
    "upload": ("create",),
    "write": ("create", "update"),
    "edit": ("update",),
    "change": ("update",),
    "modify": ("update",),
    "rename": ("update",),
    "set": ("update",),
    "remove": ("delete",),
    "erase": ("delete",),
    "drop": ("delete",),
    "trash": ("delete", "archive"),
    "close": ("archive",),
    "hide": ("archive",),
    "find": ("search",),
    "query": ("search",),
    "lookup": ("get",),
    "fetch": ("get",),
    "read": ("get",),
    "show": ("list", "get"),
    "download": ("export",),
    "dump": ("export",),
}


def _stem(term: str) -> str:
    """A plural `s` (or `es`) dropped so "notes" finds "note" (a substring match finds the plural too)."""
    if len(term) > 4 and term.endswith(("ches", "shes", "sses", "xes")):
        return term[:-2]
    return term[:-1] if len(term) > 3 and term.endswith("s") and not term.endswith("ss") else term


def _terms(query: str) -> list[tuple[str, ...]]:
    """The query's words (common English ones and single letters left out), stemmed, each with its synonyms:
    one group per word, the word first."""
    words = [
        _stem(t)
        for t in re.split(r"[\W_]+", query.lower())
        if t and t not in STOP_WORDS and (len(t) > 1 or t.isdigit())
    ]
    return [(word, *(s for s in SYNONYMS.get(word, ()) if s != word)) for word in words]


def search(index: ToolIndex, query: str, limit: int = SEARCH_LIMIT) -> list[tuple[str, str]]:
    """The tools best matching `query`, best first: a word in the tool's name counts three, elsewhere one (a tool's
    words include its name's, so a name match counts 2 + 1). A query word counts once per tool, through itself or
    the synonym that scores best there."""
    scores: dict[int, int] = {}
    for group in _terms(query):
        best: dict[int, int] = {}
        for term in group:
            found: dict[int, int] = {}
            for text, starts, weight in (
                (index.name_text, index.name_starts, 2),
                (index.words_text, index.words_starts, 1),
            ):
                hit = text.find(term)
                while hit >= 0:
                    position = bisect.bisect_right(starts, hit) - 1
                    found[position] = found.get(position, 0) + weight
                    following = position + 1
                    hit = text.find(term, starts[following]) if following < len(starts) else -1
            for position, score in found.items():
                if score > best.get(position, 0):
                    best[position] = score
        for position, score in best.items():
            scores[position] = scores.get(position, 0) + score
    best_found = heapq.nsmallest(limit, ((-score, position) for position, score in scores.items()))
    return [(index.names[p], index.summaries[p]) for _, p in best_found]


def search_text(index: ToolIndex, query: str, limit: int) -> str:
    found = search(index, query, limit)
    if not found:
        return f"No tool matches {query!r}. Try other words (the service, the action, the object)."
    return "\n".join(f"{name}: {summary}" if summary else name for name, summary in found)


def describe(index: ToolIndex, name: str) -> str | None:
    """The tool's full entry as JSON text (name, description, inputSchema, ...), or None when it has none."""
    return index.entries.get(name)
