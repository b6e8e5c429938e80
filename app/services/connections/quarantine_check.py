"""The access rule's `quarantine` check (`access.checks`): a tool whose definition changed at the
provider and that nobody has reviewed yet is neither listed nor callable (`tool_review`).

The hot paths never see such a tool: their SQL reads active tools only, so there a quarantined tool is simply
absent (and a connection whose every usable tool is quarantined has none). The explainer loads the quarantined
tools too (`load_quarantined`, one statement) so that it names the reason: for a named tool, that tool is
quarantined; for the connection, no tool is usable and some quarantined one would be. The policy check leaves those
to this one (`checks._check_policy`), so the decision is the same either way and only its name differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.services.access.checks import QUARANTINED, CheckFailure, CheckSubject, register_check
from app.services.access.effective import tools_with_policies, within_scope_action

REVIEW_HINT = "someone who can manage connections reviews and accepts the change on the connection's page"


def load_quarantined(accesses: Sequence[Any], tool_name: str | None) -> None:
    """Put each access's quarantined tools (name -> action within its access card's scope) on it."""
    if not accesses:
        return
    tools = tools_with_policies([a.connection.id for a in accesses], status="quarantined")
    for access in accesses:
        quarantined = {}
        for tool in tools.get(access.connection.id, []):
            action = within_scope_action(access.tool_scope, tool.tool.name, tool.action)
            if action is not None:
                quarantined[tool.tool.name] = action
        access.facts[QUARANTINED] = quarantined


def _check_quarantine(subject: CheckSubject) -> CheckFailure | None:
    access = subject.access
    quarantined: dict[str, str] = access.facts.get(QUARANTINED, {})
    waiting = sorted(name for name, action in quarantined.items() if action != "block")
    name = subject.tool_name
    if name is None:
        if access.has_usable_tools or not waiting:
            return None
        return CheckFailure(
            "quarantine",
            "all_quarantined",
            f"Every tool this agent could use changed at the provider and waits for review "
            f"({', '.join(waiting)}): {REVIEW_HINT}.",
        )
    if name not in waiting or any(t.tool.name == name for t in access.tools):
        return None
    return CheckFailure(
        "quarantine",
        "definition_changed",
        f"{name} changed at the provider since a person last reviewed it, so it is quarantined: {REVIEW_HINT}.",
    )


register_check("quarantine", _check_quarantine, label="Tool review (quarantine)", load=load_quarantined)
