"""axe-core on every page at desktop and phone widths: no `serious` or `critical` violation (issue 16, "Done when").

axe-core is the npm package pinned in tests/peers/axe (`make peers`); the test injects its `axe.min.js` into each page
after load and runs it with its default rules. Every violation found is printed, whatever its impact, so the
moderate ones show up in the log too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser.conftest import sign_in_through_the_form
from tests.browser.test_phone_layout import PHONE, phone_world, providers  # noqa: F401 (fixtures)
from tests.factories import DEFAULT_PASSWORD

AXE = Path(__file__).resolve().parents[1] / "peers" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
DESKTOP = {"width": 1366, "height": 900}
BLOCKING = {"serious", "critical"}
RUN_AXE = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map(n => ({target: n.target.join(' '), summary: n.failureSummary})),
  }));
}"""


def axe_violations(page) -> list[dict]:
    # Evaluated, not added as a <script> tag: the pages' Content-Security-Policy allows no inline script, and the
    # test must not weaken it (an evaluation from the test runs outside the page's policy).
    page.evaluate(AXE.read_text(encoding="utf-8") + "\n;undefined")
    return page.evaluate(RUN_AXE)


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_no_serious_or_critical_axe_violation_on_any_page(phone_world, live_server, browser, viewport):  # noqa: F811
    if not AXE.exists():
        pytest.skip(f"{AXE} is missing: run `make peers`")
    owner, paths = phone_world
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(10_000)
    blocking: dict[str, list[str]] = {}
    for path in ["/login", None, *paths]:
        if path is None:
            sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
            continue
        page.goto(f"{live_server}{path}")
        page.wait_for_load_state("load")
        for violation in axe_violations(page):
            print(f"{viewport['width']}px {path}: {json.dumps(violation, indent=1)}")
            if violation["impact"] in BLOCKING:
                blocking.setdefault(path, []).append(f"{violation['id']} ({violation['impact']})")
    context.close()
    assert blocking == {}, blocking
