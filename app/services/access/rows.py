"""The shapes of the access rule (`effective`): what it reads of connections and grants, and what it answers.

`effective_access` reads models and `eligible_access` plain rows of only the columns an eligibility caller reads
(`ConnectionRow`, `GrantRow`); the rule reads either through the protocols below (`ConnectionFields`,
`GrantFields`). Both answer with `ConnectionAccess`: one installed, live connection with the identity selected for
the run, whose properties combine the rule's steps as `effective`'s docstring numbers them. Step 4, health, reads
the connection alone (`connection_is_healthy`), so it is here with the answer that asks it; every other step is
decided in `effective`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, cast

from app.models import ConnectionTool
from app.models.connections import ATTENTION_HEALTH, config_method_key, config_method_values
from app.services.access.checks import (
    IDENTITY,
    INSTRUCTIONS,
    READY,
    USABLE,
    CheckFailure,
    CheckSubject,
    registered,
)


@dataclass
class ToolAccess:
    tool: ConnectionTool
    action: str
    pinned: bool = False


class HasHealth(Protocol):
    """A connection model or a plain row of its columns: what the health step reads."""

    @property
    def health_status(self) -> str | None: ...


class ConnectionFields(HasHealth, Protocol):
    """What the rule reads of a connection: a `ToolConnection` or a `ConnectionRow`."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def status(self) -> str: ...
    @property
    def enabled(self) -> bool: ...


class GrantFields(Protocol):
    """What the rule reads of a grant (`select_grant`, `has_identity`): a `ConnectionGrant` or a `GrantRow`."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def connection_id(self) -> uuid.UUID: ...
    @property
    def kind(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def is_default(self) -> bool: ...
    @property
    def subject_user_id(self) -> uuid.UUID | None: ...
    @property
    def subject_agent_id(self) -> uuid.UUID | None: ...


ConnectionT = TypeVar("ConnectionT", bound=ConnectionFields)
GrantT = TypeVar("GrantT", bound=GrantFields)
# `ConnectionAccess`'s own parameters are unbounded: mypy checks the bound of a type argument such as
# `ConnectionAccess[ToolConnection, ...]` while the models are still half analysed (their import cycle) and refuses
# it. The two properties that read the protocols say so with a cast.
_Connection = TypeVar("_Connection")
_Grant = TypeVar("_Grant")


class ConnectionRow(NamedTuple):
    """The columns of a connection an eligibility caller reads (`eligible_access`), named as on `ToolConnection`.

    `config_json` and `agent_instructions_json` are those JSON columns as the database's text (None for SQL NULL),
    decoded only when read (`config`, `agent_instructions`): a caller that keeps what it derives from them can key it
    on the text and skip decoding. `catalog_version` is the content hash of its app's cached catalog row (None when
    the catalog has no such app), read in the same statement, for `loader.get_app_versions`.
    """

    id: uuid.UUID
    app_slug: str
    name: str
    status: str
    enabled: bool
    health_status: str
    config_json: str
    agent_instructions_json: str | None
    catalog_version: str | None

    @property
    def config(self) -> dict:
        return cast(dict, json.loads(self.config_json))

    @property
    def agent_instructions(self) -> dict | None:
        text = self.agent_instructions_json
        return None if text is None else cast("dict | None", json.loads(text))

    @property
    def method_key(self) -> str | None:
        return config_method_key(self.config)

    @property
    def method_config(self) -> dict:
        return config_method_values(self.config)


class GrantRow(NamedTuple):
    """The columns of a grant the rule reads, named as on `ConnectionGrant`."""

    id: uuid.UUID
    connection_id: uuid.UUID
    kind: str
    status: str
    is_default: bool
    subject_user_id: uuid.UUID | None
    subject_agent_id: uuid.UUID | None


@dataclass
class ConnectionAccess(Generic[_Connection, _Grant]):
    """One installed, live connection of an agent with the identity selected for the run (models from
    `effective_access`, plain rows from `eligible_access`)."""

    connection: _Connection
    grant: _Grant | None
    tools: list[ToolAccess] = field(default_factory=list)
    # With `with_tools=False` only these are loaded (readiness needs no tool rows): whether the connection has an
    # active tool at all, and one that is not blocked.
    any_tools: bool | None = None
    any_usable_tools: bool | None = None
    # The access card's scope when the agent reaches this connection only through one (see `scopes`); callers that
    # read plain tool rows themselves (gateway listings) apply it with `within_scope_action`.
    tool_scope: dict[str, str] | None = None
    # The facts the checks read besides the above (`checks`): whether the connection is installed for the agent
    # (always, except for the explainer's reads), the identities read with it (every one of the connection for
    # `effective_access`; `eligible_access` reads only those `select_grant` could pick), the agent, and the
    # responsible person while they are an active member with write access.
    installed: bool = True
    grants: Sequence[_Grant] = ()
    agent_id: uuid.UUID | None = None
    responsible: uuid.UUID | None = None
    # Facts a registered check's loader adds (`checks.Load`; the explainer loads them, the hot paths do not).
    facts: dict[str, Any] = field(default_factory=dict)

    def first_failure(
        self, names: Sequence[str] = READY, tool_name: str | None = None, app_definition: Any = None
    ) -> CheckFailure | None:
        """The first of the checks `names` (in the rule's order, `checks.CHECK_ORDER`) that fails, or None when
        they all pass: every decision below is this loop over its own checks. Advisory checks (`blocks_tools`
        False) take part only when `app_definition` is given (the explainer)."""
        subject = CheckSubject(self, tool_name, app_definition)
        for check in registered(names):
            if not check.blocks_tools and app_definition is None:
                continue
            failure = check.decide(subject)
            if failure is not None:
                return failure
        return None

    @property
    def usable_tools(self) -> list[ToolAccess]:
        return [t for t in self.tools if t.action != "block"]

    @property
    def has_tools(self) -> bool:
        return bool(self.tools) if self.any_tools is None else self.any_tools

    @property
    def has_usable_tools(self) -> bool:
        """At least one tool that is allowed or asks first (blocked tools do not count)."""
        return bool(self.usable_tools) if self.any_usable_tools is None else self.any_usable_tools

    @property
    def has_identity(self) -> bool:
        """An active identity this run may act as (`checks.IDENTITY`)."""
        return self.first_failure(IDENTITY) is None

    @property
    def is_healthy(self) -> bool:
        """The health check alone."""
        return connection_is_healthy(cast(HasHealth, self.connection))

    @property
    def usable_now(self) -> bool:
        """The gateway lists and calls the tools of such connections (`checks.USABLE`)."""
        return self.first_failure(USABLE) is None

    @property
    def is_ready(self) -> bool:
        """Every check that blocks tools passes (`checks.READY`): usable now, with at least one permitted tool."""
        return self.first_failure(READY) is None

    @property
    def serves_instructions(self) -> bool:
        """An identity and a permitted tool: the connection's instructions reach the agent (health aside)."""
        return self.first_failure(INSTRUCTIONS) is None

    @property
    def callable_tool_names(self) -> set[str]:
        """Names of the tools the agent may call now (none unless `usable_now`); needs `with_tools=True`."""
        return {t.tool.name for t in self.usable_tools} if self.usable_now else set()


def connection_is_healthy(connection: HasHealth) -> bool:
    """Rule step 4: no health status that asks for attention (anything with a `health_status`: rows or models)."""
    return connection.health_status not in ATTENTION_HEALTH
