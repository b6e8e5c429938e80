"""The access rule as ordered checks: every decision of `effective` is "these checks all pass", and the explainer
("why can't Builder use Notion?", `explain`) names the first one that does not.

The order is the rule's own, fixed in `CHECK_ORDER`:

1. `grant`: the connection has an identity that could serve this agent at all (the organization's, this agent's
   own, or some person's);
2. `audience`: it is installed for the agent, directly or for the whole company;
3. `identity_owner`: one of those identities is this run's to use: the organization's, the agent's own, or the
   responsible person's own personal one (while they are an active member with write access);
4. `enabled`: set up, neither disconnected nor archived, and switched on by its managers;
5. `health`: no health status that asks for attention;
6. `credentials`: one such identity is active (not revoked, expired or waiting for reauthorization) and the choice
   is not ambiguous (`effective.select_grant` picks it);
7. `policy`: a tool passes the action policy and the access card's scope (for a named tool: that tool);
8. `quarantine`: the tool (for the connection: every tool it could use) changed at the provider and waits for
   review (`app.services.connections.quarantine_check`);
9. `limit`: a call limit of the connection is used up now for the agent, its identity or the named tool, and
   frees when its window ends (`app.services.gateway.limit_check`);
10. `required_configuration`: the connection's required public settings are filled in. Advisory: the Permissions
    page promises "existing tools remain available" without them, so it never blocks tools; it is what keeps the
    connection's standing instructions from the agent. Filled by `app.services.connections.instructions` (the
    owner of the setting rules, `instruction_context`) through the extension point below.

Which checks a decision asks (`USABLE`, `IDENTITY`, `READY`, `INSTRUCTIONS`) is named here, and
`ConnectionAccess.first_failure` is the one loop that runs them, short-circuiting at the first failure. The hot paths
(search readiness, the gateway's listing and calls) run the same loop; their SQL already keeps only installed, live
connections (`effective.installed_clause`, `effective.live_clause`), so there `audience` and `enabled` pass for
every access they see. The explainer (`access_statements`' `explain` variant) reads the `audience` clause as a
column instead of a filter, and does not filter on liveness (the `enabled` check decides from the row);
`effective.live_clause` and `connection_is_live` state the same rule in SQL and Python, held in step by
tests/services/access/test_access_predicate.py and the property test.

Extension point. A feature adds a check by defining `decide(subject) -> CheckFailure | None` and calling
`register_check(name, decide, label=...)` once at import, with `name` one of the slots of `CHECK_ORDER` (quarantine,
limit). It then takes part in every decision that asks for checks "through the end" (`READY`, the tool decision of
the explainer) in its place in the order. A per-tool rule (quarantine) keeps the two tool answers in step: the
connection-level answer (no tool named) fails when no tool the listing would show is left, so search readiness
and the gateway's listing still agree (tests/services/access/test_access_property.py). A check reads only what the
access already carries (`subject.access`: connection, identities, tools with their actions, scope): it must not
query per connection; a feature that needs more facts loads them with the access statements (batched) and puts
them on the access. Until a slot is filled, the explainer lists it as `not_checked`.

Facts only the explainer reads. A check may also register `load(accesses, tool_name)`, which puts facts on
`ConnectionAccess.facts` in one batched statement; the explainer calls it, the hot paths do not, and the check
passes without its facts. Quarantine and limit work that way: the hot paths' SQL already leaves quarantined tools
out (so they fail `policy` there, with the same decision; `policy` leaves a tool the facts name as quarantined to
`quarantine`), and a used-up limit is refused at call time (with `retryAfterSeconds`) rather than hiding tools, so
search and the listing still agree with the explainer except while a limit is used up, when only the explainer
says why the next call would be refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.models.connections import ATTENTION_HEALTH

CHECK_ORDER = (
    "grant",
    "audience",
    "identity_owner",
    "enabled",
    "health",
    "credentials",
    "policy",
    "quarantine",
    "limit",
    "required_configuration",
)
# The `ConnectionAccess.facts` key under which the quarantine check's loader puts the quarantined tools.
QUARANTINED = "quarantined"
# The checks each decision asks, in `CHECK_ORDER`.
IDENTITY = ("grant", "identity_owner", "credentials")
USABLE = ("grant", "audience", "identity_owner", "enabled", "health", "credentials")
INSTRUCTIONS = ("grant", "identity_owner", "credentials", "policy")
# Everything that blocks tools: a slot a feature fills joins it (`register_check`).
READY = CHECK_ORDER


@dataclass(frozen=True)
class CheckFailure:
    """The first check that did not pass: its name, a reason code inside it, and a sentence for people."""

    check: str
    reason: str
    message: str


@dataclass(frozen=True)
class CheckSubject:
    """What a check decides on: one access (connection and identities as the run sees them), optionally one tool
    by its provider name, and the app definition when the caller has it (only the advisory check reads it)."""

    # A `rows.ConnectionAccess` (typed loosely: `rows` runs these checks, so this module cannot import it).
    access: Any
    tool_name: str | None = None
    app_definition: Any = None


Decide = Callable[[CheckSubject], "CheckFailure | None"]
# Loads the facts a check reads beyond the access statements onto each access (`ConnectionAccess.facts`), batched
# over the accesses; the explainer calls it for the slots it fills (quarantine, limit).
Load = Callable[[Sequence[Any], "str | None"], None]


@dataclass(frozen=True)
class Check:
    name: str
    label: str
    decide: Decide
    # False: reported by the explainer, never part of a tool decision (`required_configuration`).
    blocks_tools: bool = True
    load: Load | None = None


_registered: dict[str, Check] = {}
# `registered(names)` per tuple of names, forgotten whenever a check is registered (the hot paths ask per access).
_by_names: dict[tuple[str, ...], tuple[Check, ...]] = {}


def register_check(
    name: str, decide: Decide, *, label: str, blocks_tools: bool = True, load: Load | None = None
) -> None:
    """Fill the slot `name` of `CHECK_ORDER` (see "Extension point" above); registering a name again replaces it."""
    if name not in CHECK_ORDER:
        raise ValueError(f"{name!r} is not a slot of the access rule's check order")
    _registered[name] = Check(name, label, decide, blocks_tools, load)
    _by_names.clear()


def registered(names: Iterable[str] = CHECK_ORDER) -> tuple[Check, ...]:
    """The filled checks among `names`, in the rule's order."""
    key = tuple(names)
    found = _by_names.get(key)
    if found is None:
        wanted = set(key)
        found = _by_names[key] = tuple(
            _registered[n] for n in CHECK_ORDER if n in wanted and n in _registered
        )
    return found


def label_of(name: str) -> str:
    check = _registered.get(name)
    return check.label if check is not None else name.replace("_", " ").capitalize()


# --- the checks ------------------------------------------------------------------------------------------------


def _serves_agent(grant: Any, agent_id: Any) -> bool:
    return grant.kind == "organization" or (grant.kind == "agent" and grant.subject_agent_id == agent_id)


def _check_grant(subject: CheckSubject) -> CheckFailure | None:
    access = subject.access
    if any(_serves_agent(g, access.agent_id) or g.kind == "user" for g in access.grants):
        return None
    return CheckFailure(
        "grant",
        "no_identity",
        "The connection has no identity this agent could act as: no organization identity, no identity of its "
        "own, and no person's.",
    )


def _check_audience(subject: CheckSubject) -> CheckFailure | None:
    if subject.access.installed:
        return None
    return CheckFailure(
        "audience",
        "not_installed",
        "The connection is not installed for this agent: add the agent (or all agents) to its agent access.",
    )


def _owned(grant: Any, access: Any) -> bool:
    """An identity this run may act as by ownership (status aside): `select_grant`'s candidates."""
    if _serves_agent(grant, access.agent_id):
        return True
    return (
        grant.kind == "user"
        and access.responsible is not None
        and grant.subject_user_id == access.responsible
    )


def _check_identity_owner(subject: CheckSubject) -> CheckFailure | None:
    access = subject.access
    if any(_owned(g, access) for g in access.grants):
        return None
    if access.responsible is None:
        return CheckFailure(
            "identity_owner",
            "no_responsible_person",
            "Its only identities are personal, and the run's responsible person is not an active member with "
            "write access: a personal identity serves only runs its owner is responsible for.",
        )
    return CheckFailure(
        "identity_owner",
        "someone_elses_identity",
        "Its only identities are other people's personal identities: a personal identity serves only runs its "
        "owner is responsible for.",
    )


def _check_enabled(subject: CheckSubject) -> CheckFailure | None:
    connection = subject.access.connection
    if connection.status != "active":
        words = {
            "draft": "its setup is not finished",
            "disconnected": "it was disconnected: reconnect it",
            "archived": "it was deleted",
        }
        return CheckFailure(
            "enabled",
            connection.status,
            f"The connection is not live: {words.get(connection.status, 'inactive')}.",
        )
    if not connection.enabled:
        return CheckFailure(
            "enabled", "disabled", "The connection is switched off for agents: turn on its Enabled switch."
        )
    return None


def _check_health(subject: CheckSubject) -> CheckFailure | None:
    health = subject.access.connection.health_status
    if health not in ATTENTION_HEALTH:
        return None
    return CheckFailure(
        "health", health, f"The connection needs attention (health: {health.replace('_', ' ')})."
    )


def _check_credentials(subject: CheckSubject) -> CheckFailure | None:
    access = subject.access
    if access.grant is not None:
        return None
    owned = [g for g in access.grants if _owned(g, access)]
    if any(g.status == "active" for g in owned):
        return CheckFailure(
            "credentials",
            "ambiguous",
            "The connection has several active organization identities and none is the default.",
        )
    status = owned[0].status if owned else "missing"
    return CheckFailure(
        "credentials",
        status,
        f"The identity this agent would act as is {status.replace('_', ' ')}: reconnect it to renew its "
        "credentials.",
    )


def _check_policy(subject: CheckSubject) -> CheckFailure | None:
    access = subject.access
    name = subject.tool_name
    # Quarantined tools (name -> action within scope, loaded by the quarantine check for the explainer only): the
    # hot paths' SQL leaves them out, so there they read as absent; the explainer lets `quarantine` name them.
    quarantined: dict[str, str] = access.facts.get(QUARANTINED, {})
    if name is None:
        if access.has_usable_tools or any(a != "block" for a in quarantined.values()):
            return None
        if not access.has_tools:
            return CheckFailure(
                "policy", "no_tools", "The connection has no tools this agent may reach: refresh its tools."
            )
        return CheckFailure(
            "policy", "all_blocked", "Every tool of the connection is blocked for this agent."
        )
    if access.any_tools is not None:
        raise ValueError("Naming a tool needs the access read with its tools (with_tools=True).")
    found = next((t for t in access.tools if t.tool.name == name), None)
    action = found.action if found is not None else quarantined.get(name)
    if action is None:
        if access.tool_scope is not None and name not in access.tool_scope:
            return CheckFailure(
                "policy",
                "out_of_scope",
                f"The agent's access to this connection covers only the tools an access card named; {name} is "
                "not one of them.",
            )
        return CheckFailure("policy", "unknown_tool", f"The connection has no tool named {name}.")
    if action == "block":
        return CheckFailure(
            "policy", "blocked", f"An administrator blocked {name} for agents on this connection."
        )
    return None


register_check("grant", _check_grant, label="Identity exists")
register_check("audience", _check_audience, label="Agent access (audience)")
register_check("identity_owner", _check_identity_owner, label="Identity owner")
register_check("enabled", _check_enabled, label="Enabled")
register_check("health", _check_health, label="Health")
register_check("credentials", _check_credentials, label="Credentials")
register_check("policy", _check_policy, label="Tool policy")
# `required_configuration` is filled by the connections package, which owns the setting rules
# (`app.services.connections.instructions`).
