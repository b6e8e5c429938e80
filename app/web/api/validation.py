"""Request-body validation for JSON routes with pydantic models: 400 {"error": "Validation error", "details"}."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar

from flask import request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError

from app.core.errors import ValidationFailed
from app.web.json_body import EMPTY, NOT_JSON_MESSAGE, BodyNotJson, read_json_body
from app.web.openapi.responses import ValidationErrorResponse, respond

ModelT = TypeVar("ModelT", bound=BaseModel)


class StrictBody(BaseModel):
    """Base for request bodies: unknown keys are refused, strings are stripped."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


BodyValidationError = ValidationFailed


def _whole_number(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# An integer as JSON means it: `3` or `3.0` (the same number; JSON Schema's `integer` allows both), never `"3"`,
# `true` or `3.5`.
WholeNumber = Annotated[int, BeforeValidator(_whole_number), Strict()]


def _without_default(schema: dict) -> None:
    schema.pop("default", None)


def Omittable(**constraints: Any) -> Any:  # noqa: N802 (used like pydantic's Field)
    """A field that may be left out but is never `null` (unless its type says so): not sending it means "leave it
    alone" (it is then missing from `model_fields_set`), and the document shows no default for it."""
    return Field(default=None, json_schema_extra=_without_default, **constraints)


def _not_json(message: str = NOT_JSON_MESSAGE) -> BodyValidationError:
    return BodyValidationError([{"loc": [], "msg": message, "type": "json_invalid"}])


def parse_body(model: type[ModelT]) -> ModelT:
    """The body validated by `model`; no body is `{}`. Anything else refused: 400 `Validation error`."""
    try:
        data = read_json_body()
    except BodyNotJson as err:
        raise _not_json(err.message) from None
    if data is EMPTY:
        data = {}
    elif not request.is_json:
        raise _not_json()
    if not isinstance(data, dict):
        raise BodyValidationError([{"loc": [], "msg": "Body must be a JSON object", "type": "object_type"}])
    try:
        return model.model_validate(data)
    except ValidationError as err:
        details = [
            {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
            for e in err.errors(include_url=False, include_input=False)
        ]
        raise BodyValidationError(details) from None


def validation_error_response(err: BodyValidationError) -> ResponseReturnValue:
    return respond(
        ValidationErrorResponse.model_validate({"error": "Validation error", "details": err.details}),
        err.status,
    )


@contextmanager
def conflicts_with_state() -> Iterator[None]:
    """Around a service that checks a body's values against the state they are for (an app's method fields, a
    connection's tools, the company's agents and connection names): the body already passed `parse_body`, the rules
    the document states, so such a refusal is a conflict with that state, 409 with the same details."""
    try:
        yield
    except ValidationFailed as err:
        raise ValidationFailed(err.details, status=409) from None
