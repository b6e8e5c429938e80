"""The board API's connection models: the bodies the connection routes validate, and the responses they send."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

from app.models import ToolConnection
from app.services.access.effective import tools_with_policies
from app.services.connections.audience import Audience, audience_of
from app.services.connections.instructions import INSTRUCTIONS_MAX_LENGTH
from app.web.api.validation import Omittable, StrictBody, WholeNumber

# --- request bodies --------------------------------------------------------------------------------------------

ShortText = Annotated[str, StringConstraints(strip_whitespace=True, max_length=2000)]
# A method config value: text, a flag, or null (which clears the setting). Booleans are never coerced from text.
ConfigValue = ShortText | StrictBool | None


class AudienceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allAgents: StrictBool = True
    agentIds: list[uuid.UUID] = Field(default_factory=list, max_length=500)

    def to_audience(self) -> Audience:
        return Audience(self.allAgents, tuple(dict.fromkeys(self.agentIds)))


class TemplateRefBody(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    id: Annotated[str, StringConstraints(min_length=1, max_length=160)]
    version: WholeNumber = Field(gt=0)


class InstructionsBody(BaseModel):
    """The rules of a saved setting (`services.connections.instructions.InstructionsSetting`, which checks them
    again): trimmed text of 1-2000 characters."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    enabled: StrictBool
    text: Annotated[str, StringConstraints(min_length=1, max_length=INSTRUCTIONS_MAX_LENGTH)]
    template: TemplateRefBody | None = None


class ConnectBody(StrictBody):
    appSlug: Annotated[str, StringConstraints(min_length=1, max_length=80)]
    methodKey: Annotated[str, StringConstraints(min_length=1, max_length=80)] | None = None
    name: Annotated[str, StringConstraints(max_length=200)] | None = None
    identity: Literal["organization", "user"] = "user"
    credentials: dict[str, ShortText] = Field(default_factory=dict, max_length=20)
    methodConfig: dict[str, ConfigValue] = Field(default_factory=dict, max_length=50)
    audience: AudienceBody | None = None
    agentInstructions: InstructionsBody | None = None
    # A pending card to resolve when this draft is finished: the audience is saved on the card (default: the
    # requesting agent only), never on the draft.
    interactionId: uuid.UUID | None = None


class FinishBody(StrictBody):
    """Fields left out keep their saved values; only `agentInstructions` may be null (no instructions)."""

    credentials: dict[str, ShortText] = Field(default_factory=dict, max_length=20)
    methodConfig: dict[str, ConfigValue] = Omittable(max_length=50)
    audience: AudienceBody = Omittable()
    agentInstructions: InstructionsBody | None = None


class PatchBody(StrictBody):
    """Fields left out are unchanged; only `agentInstructions` may be null (removes the instructions)."""

    # At least one field (the service refuses an empty change); said here so the document says it too.
    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    name: Annotated[str, StringConstraints(min_length=1, max_length=200)] = Omittable()
    enabled: StrictBool = Omittable()
    agentInstructions: InstructionsBody | None = None
    methodConfig: dict[str, ConfigValue] = Omittable(max_length=50)
    audience: AudienceBody = Omittable()
    toolPolicies: dict[str, Literal["allow", "ask_first", "block"]] = Omittable(max_length=2000)


# --- responses -------------------------------------------------------------------------------------------------


class ConnectionConfigResponse(BaseModel):
    connectionMethodKey: str | None
    methodConfig: dict[str, Any]


class AudienceResponse(BaseModel):
    allAgents: bool
    agentIds: list[uuid.UUID]


class ConnectionToolResponse(BaseModel):
    name: str
    description: str | None
    isWrite: bool
    action: Literal["allow", "ask_first", "block"]


class ConnectionResponse(BaseModel):
    id: uuid.UUID
    companyId: uuid.UUID
    appSlug: str
    name: str
    status: str
    enabled: bool
    healthStatus: str
    authKind: str
    identity: Literal["organization", "user"] | None
    config: ConnectionConfigResponse
    agentInstructions: dict[str, Any] | None
    providerAccountLabel: str | None
    audience: AudienceResponse
    createdByUserId: uuid.UUID | None
    tools: list[ConnectionToolResponse]

    @classmethod
    def of(cls, connection: ToolConnection, tools: list | None = None) -> ConnectionResponse:
        """The connection with its tools and their policies (`tools`: already loaded for a listing)."""
        if tools is None:
            tools = tools_with_policies([connection.id]).get(connection.id, [])
        config = connection.config or {}
        audience = audience_of(connection)
        return cls(
            id=connection.id,
            companyId=connection.company_id,
            appSlug=connection.app_slug,
            name=connection.name,
            status=connection.status,
            enabled=connection.enabled,
            healthStatus=connection.health_status,
            authKind=connection.auth_kind,
            identity=config.get("identity"),
            config=ConnectionConfigResponse(
                connectionMethodKey=config.get("connectionMethodKey"),
                methodConfig=config.get("methodConfig") or {},
            ),
            agentInstructions=connection.agent_instructions,
            providerAccountLabel=connection.provider_account_label,
            audience=AudienceResponse(allAgents=audience.all_agents, agentIds=list(audience.agent_ids)),
            createdByUserId=connection.created_by_user_id,
            tools=[
                ConnectionToolResponse(
                    name=t.tool.name, description=t.tool.description, isWrite=t.tool.is_write, action=t.action
                )
                for t in tools
            ],
        )


class ConnectionListResponse(BaseModel):
    connections: list[ConnectionResponse]

    @classmethod
    def of(cls, connections: list[ToolConnection]) -> ConnectionListResponse:
        tools = tools_with_policies([c.id for c in connections]) if connections else {}
        return cls(connections=[ConnectionResponse.of(c, tools.get(c.id, [])) for c in connections])
