"""Context cost (issue 32 item 2): what an agent's `tools/list` costs in tokens, the full listing vs the meta tools,
at 10, 100, 1,000 and 5,000 tools; the `search_tools` latency (per query the best of 5 runs: the median, and the
slowest query); and the share of natural queries whose wanted tool is
in search's top 5 (the fixed query set `QUERIES` below, and `HELD_OUT`, written after the ranking's synonyms).

In process, no database: the catalog is synthetic but every entry is written by the gateway's own entry builder
(`gateway.listing.tool_definition`, the code a listing uses), and search runs the gateway's own index and ranking
(`gateway.meta_tools`). Tokens are the documented estimate, characters / 4 (`meta_tools.CHARS_PER_TOKEN`): no
tokenizer package is installed. Services are the catalog's apps (`app/catalog/definitions`), each with up to 200
tools (8 verbs x 25 objects), every tool with a 3-6 argument input schema whose arguments are described.

    .venv/bin/python bench/context_cost.py [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.core.raw_json import RawJSON  # noqa: E402
from app.services.gateway import meta_tools  # noqa: E402
from app.services.gateway.listing import tool_definition  # noqa: E402

SIZES = (10, 100, 1_000, 5_000)
TOP = 5
REPEATS = 5
VERBS = ("list", "get", "create", "update", "delete", "search", "archive", "export")
OBJECTS = [
    "issue",
    "pull_request",
    "comment",
    "file",
    "folder",
    "task",
    "project",
    "deal",
    "contact",
    "message",
    "channel",
    "page",
    "database",
    "invoice",
    "ticket",
    "user",
    "team",
    "release",
    "build",
    "alert",
    "metric",
    "log",
    "event",
    "order",
    "customer",
]
_VERB_TEXT = {
    "list": "List the {o}s of the account, newest first, a page at a time.",
    "get": "Get one {o} by its id, with all of its fields.",
    "create": "Create a new {o}. Returns the created {o} with its id.",
    "update": "Update the fields of an existing {o}. Fields left out keep their value.",
    "delete": "Delete a {o} permanently. This cannot be undone.",
    "search": "Search {o}s by text, with optional filters, best matches first.",
    "archive": "Archive a {o}: it is hidden from lists but can be restored.",
    "export": "Export {o}s as CSV or JSON, for a date range.",
}

# Natural requests and the tool that answers them (the words a person would use, not the tool's name).
QUERIES = (
    ("what asana issues are open", "asana__list_issue"),
    ("open a new issue in github", "github__create_issue"),
    ("find github pull requests about the login bug", "github__search_pull_request"),
    ("show me my asana tasks", "asana__list_task"),
    ("remove a hubspot deal", "hubspot__delete_deal"),
    ("look up a hubspot contact by id", "hubspot__get_contact"),
    ("post a message to a slack channel", "slack__create_message"),
    ("which notion pages mention the roadmap", "notion__search_page"),
    ("edit the notion database properties", "notion__update_database"),
    ("download stripe invoices as csv", "stripe__export_invoice"),
    ("close out an intercom ticket", "intercom__archive_ticket"),
    ("add a comment on a linear issue", "linear__create_comment"),
    ("new jira project", "atlassian__create_project"),
    ("upload a file to box", "box__create_file"),
    ("list the folders in box", "box__list_folder"),
    ("cloudflare alerts from last week", "cloudflare__list_alert"),
    ("export sentry events", "sentry__export_event"),
    ("get the figma file", "figma__get_file"),
    ("update a customer in square", "square__update_customer"),
    ("delete a canva page", "canva__delete_page"),
    ("search paypal orders for a refund", "paypal__search_order"),
)
# Written after the synonym table (`meta_tools.SYNONYMS`) was, to check that it is not fitted to `QUERIES` alone.
HELD_OUT = (
    ("change the title of a github issue", "github__update_issue"),
    ("erase an asana project", "asana__delete_project"),
    ("make a new hubspot contact", "hubspot__create_contact"),
    ("fetch a stripe invoice", "stripe__get_invoice"),
    ("show the slack channels", "slack__list_channel"),
    ("send a message in slack", "slack__create_message"),
    ("modify a notion page", "notion__update_page"),
    ("look for jira tickets about billing", "atlassian__search_ticket"),
    ("dump sentry logs to csv", "sentry__export_log"),
    ("hide an old box folder", "box__archive_folder"),
    ("rename a figma file", "figma__update_file"),
    ("find customers in square", "square__search_customer"),
)


def services() -> list[tuple[str, str]]:
    """The catalog's apps: (slug, name)."""
    found = []
    for path in sorted((Path(__file__).resolve().parent.parent / "app/catalog/definitions").glob("*.json")):
        definition = json.loads(path.read_text())
        found.append((definition["slug"], definition["name"]))
    return found


def _schema(verb: str, obj: str) -> dict:
    noun = obj.replace("_", " ")
    properties: dict = {}
    if verb in ("get", "update", "delete", "archive"):
        properties[f"{obj}_id"] = {"type": "string", "description": f"The id of the {noun}."}
    if verb in ("create", "update"):
        properties["title"] = {"type": "string", "description": f"The {noun}'s title."}
        properties["body"] = {"type": "string", "description": f"The {noun}'s text, in Markdown."}
        properties["labels"] = {"type": "array", "items": {"type": "string"}, "description": "Labels to set."}
    if verb in ("list", "search", "export"):
        properties["query"] = {"type": "string", "description": "Words to match; empty for all."}
        properties["since"] = {
            "type": "string",
            "format": "date-time",
            "description": "Only those after this.",
        }
        properties["limit"] = {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "description": "At most this many.",
        }
        properties["cursor"] = {"type": "string", "description": "The cursor of the page to read."}
    if verb == "export":
        properties["format"] = {"type": "string", "enum": ["csv", "json"], "description": "The file format."}
    properties["workspace"] = {
        "type": "string",
        "description": "The workspace; the default one when left out.",
    }
    required = [k for k in properties if k.endswith("_id") or k == "title"]
    return {"type": "object", "properties": properties, "required": required}


def catalog(size: int) -> list[dict]:
    """`size` tool entries, service by service (200 each), as the gateway lists them."""
    entries: list[dict] = []
    for slug, name in services():
        for obj in OBJECTS:
            for verb in VERBS:
                if len(entries) == size:
                    return entries
                tool_name = f"{verb}_{obj}"
                is_write = verb in ("create", "update", "delete", "archive")
                description = f"{_VERB_TEXT[verb].format(o=obj.replace('_', ' '))} ({name})"
                entries.append(
                    tool_definition(
                        f"{slug}__{tool_name}",
                        tool_name,
                        description,
                        _schema(verb, obj),
                        is_write,
                        name,
                        "ask_first" if verb == "delete" else "allow",
                        {},
                    )
                )
    return entries


def measure(size: int) -> dict:
    entries = catalog(size)
    listing = RawJSON.of(entries)
    started = time.perf_counter()
    index = meta_tools.ToolIndex.of(listing)
    index_ms = (time.perf_counter() - started) * 1000
    asked = [(query, wanted) for query, wanted in QUERIES if wanted in index.entries]
    hits, latencies = 0, []
    for query, wanted in asked:
        timings = []
        for _ in range(REPEATS):  # the best of a few: the machine may be shared
            started = time.perf_counter()
            found = meta_tools.search(index, query, meta_tools.SEARCH_LIMIT)
            timings.append((time.perf_counter() - started) * 1000)
        latencies.append(min(timings))
        hits += wanted in [name for name, _ in found[:TOP]]
    held_out = [(query, wanted) for query, wanted in HELD_OUT if wanted in index.entries]
    held_out_hits = sum(
        wanted in [name for name, _ in meta_tools.search(index, query, TOP)] for query, wanted in held_out
    )
    full = meta_tools.estimated_tokens(listing.text)
    meta = meta_tools.estimated_tokens(meta_tools.LISTING.text)
    return {
        "tools": len(entries),
        "full_tokens": full,
        "meta_tokens": meta,
        "ratio": round(full / meta, 1),
        "index_build_ms": round(index_ms, 1),
        "search_p50_ms": round(statistics.median(latencies), 2) if latencies else None,
        "search_max_ms": round(max(latencies), 2) if latencies else None,
        "queries": len(asked),
        "top5": hits,
        "held_out": len(held_out),
        "held_out_top5": held_out_hits,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = [measure(size) for size in SIZES]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        "| tools | full listing, tokens | meta tools, tokens | full / meta | search p50 (max) | top-5 hits | held out |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        share = f"{row['top5']}/{row['queries']}" if row["queries"] else "no query's tool listed"
        held = f"{row['held_out_top5']}/{row['held_out']}" if row["held_out"] else "-"
        search = f"{row['search_p50_ms']} ms ({row['search_max_ms']})" if row["queries"] else "-"
        print(
            f"| {row['tools']:,} | {row['full_tokens']:,} | {row['meta_tokens']:,} | {row['ratio']}x | {search} "
            f"| {share} | {held} |"
        )


if __name__ == "__main__":
    main()
