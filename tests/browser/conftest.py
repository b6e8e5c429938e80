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
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        yield page
    finally:
        context.close()


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
