"""The services people connect agents to are in the catalog, with the server URL and auth method each provider
documents; agents find them through connections_search; the Apps page filters 30+ apps by category and search."""

from __future__ import annotations

import json
import shutil

from app.catalog.loader import DEFINITIONS_DIR, ingest_definitions, list_apps
from tests.conftest import count_statements
from tests.doors import search
from tests.web.apps.test_apps_pages import HX, html, sign_in

# slug -> [(method key, auth, server URL, dynamic client registration)], as each provider documents them.
FIRST_PARTY_REMOTES = {
    "asana": [("mcp-oauth", "oauth", "https://mcp.asana.com/v2/mcp", False)],
    "atlassian": [
        ("mcp-oauth", "oauth", "https://mcp.atlassian.com/v1/mcp", True),
        ("mcp-key", "api_key", "https://mcp.atlassian.com/v1/mcp", False),
    ],
    "box": [("mcp-oauth", "oauth", "https://mcp.box.com", False)],
    "canva": [("mcp-oauth", "oauth", "https://mcp.canva.com/mcp", False)],
    "cloudflare": [
        ("mcp-oauth", "oauth", "https://mcp.cloudflare.com/mcp", True),
        ("mcp-key", "api_key", "https://mcp.cloudflare.com/mcp", False),
    ],
    "figma": [("mcp-oauth", "oauth", "https://mcp.figma.com/mcp", True)],
    "hubspot": [("mcp-oauth", "oauth", "https://mcp.hubspot.com", False)],
    "intercom": [
        ("mcp-oauth", "oauth", "https://mcp.intercom.com/mcp", True),
        ("mcp-key", "api_key", "https://mcp.intercom.com/mcp", False),
    ],
    "monday": [
        ("mcp-oauth", "oauth", "https://mcp.monday.com/mcp", False),
        ("mcp-key", "api_key", "https://mcp.monday.com/mcp", False),
    ],
    "neon": [
        ("mcp-oauth", "oauth", "https://mcp.neon.tech/mcp", True),
        ("mcp-key", "api_key", "https://mcp.neon.tech/mcp", False),
    ],
    "paypal": [("mcp-oauth", "oauth", "https://mcp.paypal.com/mcp", True)],
    "sentry": [("mcp-oauth", "oauth", "https://mcp.sentry.dev/mcp", True)],
    "square": [("mcp-oauth", "oauth", "https://mcp.squareup.com/mcp", False)],
    "stripe": [
        ("mcp-oauth", "oauth", "https://mcp.stripe.com", True),
        ("mcp-key", "api_key", "https://mcp.stripe.com", False),
    ],
    "supabase": [("mcp-oauth", "oauth", "https://mcp.supabase.com/mcp", True)],
    "vercel": [("mcp-oauth", "oauth", "https://mcp.vercel.com/", True)],
    "webflow": [
        ("mcp-oauth", "oauth", "https://mcp.webflow.com/mcp", True),
        ("sse-oauth", "oauth", "https://mcp.webflow.com/sse", True),
    ],
    "zapier": [("mcp-key", "api_key", "https://mcp.zapier.com/api/mcp/mcp", False)],
}


def test_first_party_remote_servers_are_catalogued_as_documented(db):
    apps = {app.slug: app for app in list_apps()}
    found = {
        slug: [
            (m.key, m.auth, m.defaults.serverUrl, m.defaults.dynamicClientRegistration)
            for m in apps[slug].methods
        ]
        for slug in FIRST_PARTY_REMOTES
        if slug in apps
    }
    assert found == FIRST_PARTY_REMOTES
    for slug in FIRST_PARTY_REMOTES:
        app = apps[slug]
        assert app.docsUrl and app.docsUrl.startswith("https://"), slug
        assert app.categories, slug
        assert app.branding.logoUrl == f"/static/img/apps/{slug}.svg"
        for method in app.methods:
            if method.auth == "api_key":
                assert method.keyPlacement.location == "header"
                assert method.keyPlacement.name == "Authorization"
            if method.auth == "oauth" and not method.defaults.dynamicClientRegistration:
                # Providers that require a pre-registered client say who registers it, in words a person
                # connecting reads (the setting's name is for operators: README, Configuration).
                assert "the person who runs Switchboard registers" in method.whenToUse, slug
                assert "SWITCHBOARD_" not in method.whenToUse, slug


def test_logos_are_our_own_simple_marks():
    for slug in FIRST_PARTY_REMOTES:
        svg = (DEFINITIONS_DIR.parents[2] / "static" / "img" / "apps" / f"{slug}.svg").read_text(
            encoding="utf-8"
        )
        assert svg.startswith(
            '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64"'
        )
        assert (
            svg.count("<rect") == 1 and svg.count("<text") == 1 and "<path" not in svg and "<image" not in svg
        )


def test_a_search_for_sentry_finds_sentry_available(client, world):
    results = search(client, world.token, "sentry").json["results"]
    assert [r["service"] for r in results] == ["sentry"]
    assert results[0]["state"] == "available"


def test_the_apps_page_offers_categories_as_filters_with_counts(client, acme):  # noqa: F811
    _company, _owner, member, *_ = acme
    sign_in(client, member)
    page = html(client.get("/apps"))
    total = len(list_apps())
    assert (
        f'<a href="/apps" class="chip" aria-current="true">All <span class="count">{total}</span></a>' in page
    )
    assert '<a href="/apps?category=payments" class="chip">Payments <span class="count">3</span></a>' in page

    payments = html(client.get("/apps?category=payments"))
    assert (
        '<a href="/apps?category=payments" class="chip" aria-current="true">Payments <span class="count">3</span></a>'
        in payments
    )
    for slug in ("paypal", "square", "stripe"):
        assert f'href="/apps/{slug}/connect"' in payments
    assert 'href="/apps/sentry/connect"' not in payments

    fragment = client.get("/apps?q=database", headers={**HX, "HX-Target": "app-list"})
    text = html(fragment)
    assert "<html" not in text and 'id="app-list"' in text
    assert 'href="/apps/neon/connect"' in text and 'href="/apps/supabase/connect"' in text
    assert 'href="/apps/stripe/connect"' not in text
    assert '<a href="/apps?q=database&amp;category=database" class="chip">Database' in text


def test_the_apps_page_costs_the_same_queries_with_more_apps(
    client, db, acme, tmp_path, real_catalog_restored
):  # noqa: F811
    _company, _owner, member, *_ = acme
    sign_in(client, member)
    client.get("/apps")  # warm the per-process cache of parsed definitions

    def catalog_queries(url: str) -> tuple[int, str]:
        with count_statements(db.engine) as statements:
            body = html(client.get(url))
        return sum("catalog_apps" in s for s in statements), body

    before, _ = catalog_queries("/apps?q=a")
    bigger = tmp_path / "definitions"
    shutil.copytree(DEFINITIONS_DIR, bigger)
    template = json.loads((DEFINITIONS_DIR / "linear.json").read_text(encoding="utf-8"))
    for number in range(12):
        template.update(slug=f"extra-{number}", name=f"Extra app {number}", featured=False)
        (bigger / f"extra-{number}.json").write_text(json.dumps(template), encoding="utf-8")
    ingest_definitions(bigger)
    db.session.commit()
    assert len(list_apps()) >= 30
    client.get("/apps")  # the new rows are parsed once
    after, body = catalog_queries("/apps?q=extra")
    assert after == before
    assert body.count('href="/apps/extra-') == 12
