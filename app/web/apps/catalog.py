"""The Apps catalog: search and category filter over the cached catalog, one card per app."""

from __future__ import annotations

from flask import render_template, request

from app.catalog.loader import list_apps, logo_url
from app.extensions import htmx
from app.web.apps import bp
from app.web.context import current_membership

QUERY_MAX_LENGTH = 200


def matches(app_definition, query: str, category: str | None) -> bool:
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


def category_label(category: str) -> str:
    return category.replace("-", " ").capitalize()


@bp.get("/apps")
def catalog():
    current_membership()
    query = (request.args.get("q") or "").strip()[:QUERY_MAX_LENGTH]
    apps = list_apps()
    categories = sorted({c for a in apps for c in a.categories})
    category = request.args.get("category") or None
    if category not in categories:
        category = None
    context = {
        "apps": [a for a in apps if matches(a, query, category)],
        "query": query,
        "category": category,
        "categories": [(c, category_label(c)) for c in categories],
        "logo_url": logo_url,
    }
    if htmx and htmx.target == "app-list":
        return render_template("apps/_app_list.html", **context)
    return render_template("apps/catalog.html", **context)
