"""All models, imported here so Alembic and the app see one metadata."""

from app.models.activity import ActivityLog
from app.models.agents import Agent, AgentSecret
from app.models.assistants import (
    AssistantClient,
    AssistantCode,
    AssistantDeviceCode,
    AssistantGrant,
    AssistantToken,
)
from app.models.connections import (
    CatalogApp,
    CatalogState,
    ConnectionGrant,
    ConnectionInstall,
    ConnectionTool,
    GrantDelegation,
    GrantSecret,
    ToolConnection,
    ToolPolicy,
)
from app.models.gateway_limits import GatewayCallCounter
from app.models.installation import CatalogIngest, InstallationSetting
from app.models.intents import ConnectionIntentDelivery
from app.models.notifications import (
    NotificationDelivery,
    NotificationPreference,
    WebhookAttempt,
    WebhookEndpoint,
)
from app.models.oauth import OAuthClientRegistration, OAuthState
from app.models.run_logs import AgentTaskSession, RunLog
from app.models.runs import GatewayCancellation, HeartbeatRun, WakeupRequest
from app.models.shared_state import ProviderBreaker, ThrottleHit
from app.models.tenancy import AccessRevision, ApiKey, Company, LoginFailure, Membership, User
from app.models.trust import ToolTrustRule
from app.models.work import Comment, Issue, Project, ThreadInteraction

__all__ = [
    "CatalogIngest",
    "InstallationSetting",
    "AssistantClient",
    "AssistantCode",
    "AssistantDeviceCode",
    "AssistantGrant",
    "AssistantToken",
    "AccessRevision",
    "AgentSecret",
    "AgentTaskSession",
    "RunLog",
    "CatalogApp",
    "CatalogState",
    "ConnectionGrant",
    "ConnectionInstall",
    "ConnectionIntentDelivery",
    "ConnectionTool",
    "GrantDelegation",
    "GrantSecret",
    "OAuthClientRegistration",
    "OAuthState",
    "ToolConnection",
    "ToolPolicy",
    "ToolTrustRule",
    "ActivityLog",
    "Agent",
    "ApiKey",
    "Comment",
    "Company",
    "GatewayCallCounter",
    "GatewayCancellation",
    "HeartbeatRun",
    "Issue",
    "LoginFailure",
    "Membership",
    "Project",
    "ProviderBreaker",
    "ThreadInteraction",
    "ThrottleHit",
    "User",
    "NotificationDelivery",
    "NotificationPreference",
    "WebhookAttempt",
    "WebhookEndpoint",
    "WakeupRequest",
]
