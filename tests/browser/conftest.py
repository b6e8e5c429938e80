"""Browser fixtures: the app served on a real loopback socket, and Chromium driven by Playwright (sync API).

Chromium is the system one (`/usr/bin/chromium`, installed by CI); no browser is downloaded. Screenshots go to
`test-artifacts/` (gitignored).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import serving

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="session")
def live_server(app):
    """The app on 127.0.0.1:<free port> in a daemon thread; yields its base URL."""
    with serving(app) as base:
        yield base


@pytest.fixture
def browser():
    """Chromium for one test. Not session-wide: Playwright's sync API keeps an asyncio loop running in the main
    thread while it is open, which would break later tests that run their own loop (e.g. `anyio.run`)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        # Every context a test opens reports Content-Security-Policy violations: the test fails on any.
        violations: list[str] = []
        new_context = chromium.new_context

        def watched_context(*args, **kwargs):
            context = new_context(*args, **kwargs)
            watch_csp(context, violations)
            return context

        chromium.new_context = watched_context  # type: ignore[method-assign]
        try:
            yield chromium
        finally:
            chromium.close()
        assert violations == [], violations


def watch_csp(context, violations: list[str] | None = None) -> list[str]:
    """Every Content-Security-Policy violation in the context's pages (Chromium reports each on the console; the
    page's own `securitypolicyviolation` event is reported there too, with the directive and what was blocked)."""
    violations = [] if violations is None else violations
    context.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "console.error('CSP violation: ' + e.violatedDirective + ' blocked ' + e.blockedURI + ' at ' + "
        "e.sourceFile + ':' + e.lineNumber + ' ' + e.sample + ' on ' + location.pathname + ' in ' + "
        "(e.target && e.target.outerHTML ? e.target.outerHTML.slice(0, 300) : '')), true)"
    )

    def on_console(message) -> None:
        if message.text.startswith("CSP violation"):
            violations.append(message.text)

    context.on("console", on_console)
    context.on("page", lambda p: p.on("console", on_console))
    return violations


@pytest.fixture
def page(browser):
    """A page; its test fails on any Content-Security-Policy violation (see `browser`)."""
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        yield page
    finally:
        context.close()


def wait_until_true(page, expression: str, timeout_ms: int = 10_000) -> None:
    """Poll a page expression until it is true. Not `page.wait_for_function`: Playwright evaluates that predicate with
    the page's eval, which the Content-Security-Policy forbids; `page.evaluate` runs outside the page's policy."""
    import time

    deadline = time.monotonic() + timeout_ms / 1000
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"never true within {timeout_ms} ms: {expression}")
        page.wait_for_timeout(25)


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def sign_in_through_the_form(page, base_url: str, email: str, password: str) -> None:
    page.goto(f"{base_url}/login")
    page.fill("#email", email)
    page.fill("#password", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)
