"""Domain errors that views translate into HTTP answers with the documented status and message."""


class ServiceError(Exception):
    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class NotFound(ServiceError):
    status = 404


class Forbidden(ServiceError):
    status = 403


class Conflict(ServiceError):
    status = 409


class Unprocessable(ServiceError):
    status = 422


class TooManyRequests(ServiceError):
    """`retry_after`: seconds until the caller may try again (the Retry-After header)."""

    status = 429

    def __init__(self, message: str, retry_after: int = 60):
        super().__init__(message)
        self.retry_after = retry_after


class ValidationFailed(ServiceError):
    """Input that failed validation; `details` lists `{loc, msg, type}` entries naming each field."""

    status = 400

    def __init__(self, details: list[dict], status: int | None = None):
        super().__init__("Validation error", status)
        self.details = details

    def field_messages(self) -> dict[str, str]:
        """Messages keyed by the last path element, for inline errors beside form fields."""
        return {str(d["loc"][-1]) if d.get("loc") else "": d["msg"] for d in self.details}


class ProviderRefused(Unprocessable):
    """The provider refused or could not be reached while verifying credentials; the message is safe to show.

    `kind` says which, for the words around it: "rejected" (the provider refused the credentials), "unreachable"
    (Switchboard could not reach `host`), or "refused" (anything else the provider answered).
    """

    def __init__(self, message: str, *, kind: str = "refused", host: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.host = host
