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
    status = 429
