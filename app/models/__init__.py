"""All models, imported here so Alembic and the app see one metadata."""

from app.models.activity import ActivityLog
from app.models.agents import Agent, AgentSecret
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
from app.models.intents import ConnectionIntentDelivery
from app.models.notifications import (  # notifications (issue 15)
    NotificationDelivery,
    NotificationPreference,
    WebhookAttempt,
    WebhookEndpoint,
)
from app.models.oauth import OAuthClientRegistration, OAuthState
from app.models.run_logs import AgentTaskSession, RunLog
from app.models.runs import GatewayCancellation, HeartbeatRun, WakeupRequest
from app.models.tenancy import AccessRevision, ApiKey, Company, LoginFailure, Membership, User
from app.models.trust import ToolTrustRule
from app.models.work import Comment, Issue, Project, ThreadInteraction

__all__ = [
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
    "GatewayCancellation",
    "HeartbeatRun",
    "Issue",
    "LoginFailure",
    "Membership",
    "Project",
    "ThreadInteraction",
    "User",
    "NotificationDelivery",
    "NotificationPreference",
    "WebhookAttempt",
    "WebhookEndpoint",
    "WakeupRequest",
]
