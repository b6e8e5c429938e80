"""The Apps catalog: search and category filter over the cached catalog, one card per app.

Both filters are query parameters of one GET page (`q`, `category`), so the page works without JavaScript; htmx swaps
only the `#app-list` fragment while typing. Filtering runs over the parsed definitions the loader caches per
process, so a larger catalog does not make the page slower.
"""

from __future__ import annotations

from collections.abc import Iterable

from flask import render_template, request
from flask.typing import ResponseReturnValue

from app.catalog.categories import category_label
from app.catalog.loader import list_apps, logo_url
from app.catalog.schema import AppDefinition
from app.extensions import htmx
from app.services.connections.ownership import connected_apps
from app.services.oauth.clients import app_needs_operator_client
from app.web.apps import bp
from app.web.context import current_membership

QUERY_MAX_LENGTH = 200


def matches(app_definition: AppDefinition, query: str, category: str | None) -> bool:
    """Case-insensitive match of every word of `query` against name, description, categories and method labels."""
    if category and category not in app_definition.categories:
        return False
    haystack = " ".join(
        [
            app_definition.name,
            app_definition.slug,
            app_definition.description,
            *app_definition.categories,
            *(m.label for m in app_definition.methods),
        ]
    ).casefold()
    return all(word in haystack for word in query.casefold().split())


def category_counts(apps: Iterable[AppDefinition], query: str) -> dict[str, int]:
    """How many apps that match `query` each category holds (the numbers on the category filters)."""
    counts: dict[str, int] = {}
    for app_definition in apps:
        if matches(app_definition, query, None):
            for category in app_definition.categories:
                counts[category] = counts.get(category, 0) + 1
    return counts


@bp.get("/apps")
def catalog() -> ResponseReturnValue:
    membership = current_membership()
    query = (request.args.get("q") or "").strip()[:QUERY_MAX_LENGTH]
    apps = list_apps()
    categories = sorted({c for a in apps for c in a.categories})
    category = request.args.get("category") or None
    if category not in categories:
        category = None
    counts = category_counts(apps, query)
    context = {
        "apps": [a for a in apps if matches(a, query, category)],
        "query": query,
        "category": category,
        # A search that leaves a category empty hides its chip (a filter that can only show nothing), except the
        # chosen one, which stays so it can be seen and left.
        "categories": [(c, category_label(c)) for c in categories if counts.get(c) or c == category],
        "category_counts": counts,
        "matching_total": sum(1 for a in apps if matches(a, query, None)),
        "logo_url": logo_url,
        # Before any click: what is connected already, and what this installation cannot connect.
        "connected": connected_apps(membership.company_id, membership.user_id),
        "needs_admin": {a.slug for a in apps if app_needs_operator_client(a)},
    }
    if htmx and htmx.target == "app-list":
        return render_template("apps/_app_list.html", **context)
    return render_template("apps/catalog.html", **context)
