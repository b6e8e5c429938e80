"""Security headers over a real socket: a strict Content-Security-Policy on every HTML page, HSTS under an https
PUBLIC_BASE_URL only. (That the pages work under the policy is checked in Chromium: tests/browser fail on any CSP
violation.)"""

from __future__ import annotations

import httpx

from tests.conftest import serving

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'self'"
)


def test_html_pages_carry_a_strict_policy_and_no_hsts_over_http(app, db):
    with serving(app) as base:
        for path in ("/login", "/signup", "/nowhere"):
            page = httpx.get(f"{base}{path}")
            assert page.headers["content-type"].startswith("text/html"), path
            assert page.headers["content-security-policy"] == POLICY, path
            assert "strict-transport-security" not in page.headers, path
        api = httpx.get(f"{base}/healthz")
        assert "content-security-policy" not in api.headers


def test_hsts_under_an_https_base_url(app, db, monkeypatch):
    monkeypatch.setitem(app.config, "PUBLIC_BASE_URL", "https://switchboard.example.com")
    with serving(app) as base:
        for path in ("/login", "/healthz"):
            answer = httpx.get(f"{base}{path}")
            assert answer.headers["strict-transport-security"] == "max-age=63072000; includeSubDomains", path
        assert httpx.get(f"{base}/login").headers["content-security-policy"] == POLICY


def test_no_template_holds_inline_script_style_handler_or_evaluated_code():
    import re

    from tests.paths import ROOT

    # Inline scripts, styles and handlers, and what htmx evaluates as code (hx-on, hx-vars, js: values, trigger
    # filters in [brackets]): the policy allows none of them.
    inline = re.compile(
        r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle=|\son[a-z]+=|javascript:|hx-on|hx-vars|js:|"
        r"hx-trigger=\"[^\"]*\[",
        re.IGNORECASE,
    )
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in sorted((ROOT / "templates").rglob("*.html"))
        for match in inline.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found == []
    from app.web.apps.permissions import SWAP_FORBIDDEN

    assert not inline.search(str(SWAP_FORBIDDEN))  # the attribute a template global adds
