"""The OAuth flow's messages and errors (reasons safe for activity and pages)."""

from __future__ import annotations

from app.core.errors import (
    ProviderRefused,
    ServiceError,
)

# A sign-in started from a connection card whose card closed (resolved, expired or superseded) meanwhile.
CARD_CLOSED = "This request was closed before sign-in finished"
INVALID_STATE = "This sign-in was already used or has expired, so nothing was connected. Start it again."
WRONG_USER = "This sign-in was started by someone else. Start it again from your own session."
NEEDS_REAUTHORIZATION = "needs_reauthorization"
REJECTED_ERRORS = ("invalid_grant", "invalid_client", "unauthorized_client")
REAUTHORIZE_MESSAGE = "The provider no longer accepts this connection's sign-in. Reconnect it to continue."

# Plain words for every way a callback can fail; the provider's own text is never shown.
FAILURE_MESSAGES = {
    "access_denied": "Sign-in to {provider} was cancelled, so nothing was connected. Try again or choose another method.",
    "provider_error": "{provider} could not complete the sign-in. Try again.",
    "missing_code": "{provider} did not send an authorization code back. Try again.",
    "issuer_mismatch": "The sign-in answer did not come from {provider}'s authorization server. Try again.",
    "exchange_failed": "{provider} did not accept the sign-in when Switchboard finished it. Try again.",
    "unreachable": "Could not reach {provider} to finish the sign-in. Try again in a moment.",
    "tools_failed": "Signed in, but {provider}'s tools could not be listed. Try again.",
}


class OAuthFlowError(ServiceError):
    """A callback that could not finish; `reason` is a key of FAILURE_MESSAGES (safe for activity and pages)."""

    status = 400

    def __init__(self, reason: str, *, provider: str = "The provider", status: int | None = None):
        self.reason = reason if reason in FAILURE_MESSAGES else "provider_error"
        super().__init__(FAILURE_MESSAGES[self.reason].format(provider=provider), status)


class SignInNotConfigured(ProviderRefused):
    """No OAuth client for this app: the operator has not configured one and the provider offers no registration.
    The words are for the person signing in; the setting's name is for the operator's log, never a page."""

    def __init__(self, provider: str):
        super().__init__(
            f"{provider} sign-in is not set up on this Switchboard yet. Ask the person who runs Switchboard to "
            f"add an OAuth client for {provider}.",
            kind="not_configured",
        )


class InvalidOAuthState(ServiceError):
    status = 400

    def __init__(self) -> None:
        super().__init__(INVALID_STATE)


class ReauthorizationRequired(ServiceError):
    """The stored authorization is no longer usable; a person must reconnect."""

    status = 409

    def __init__(self) -> None:
        super().__init__(REAUTHORIZE_MESSAGE)


class TokenRefreshUnavailable(ServiceError):
    """The token endpoint could not be reached or failed (5xx): credentials are kept, try again later."""

    status = 503

    def __init__(self) -> None:
        super().__init__("The provider's sign-in service is unavailable right now. Try again shortly.")
