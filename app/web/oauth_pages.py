"""The pages a person lands on when an OAuth sign-in cannot start or cannot finish.

Each says what happened in plain words (never a status number as its title, never a setting's name) and offers a way
back to where the person came from: the task of the card that asked, the connection's own page, its setup, or Apps.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import render_template, url_for
from flask.typing import ResponseReturnValue

from app.catalog.schema import AppDefinition
from app.core.errors import ServiceError
from app.models import ThreadInteraction, ToolConnection

START_FAILED_TITLE = "Sign-in could not start"
NOT_FINISHED_TITLE = "Sign-in not finished"


@dataclass(frozen=True)
class WayBack:
    url: str
    label: str


def way_back(
    connection: ToolConnection | None = None, interaction: ThreadInteraction | None = None
) -> WayBack:
    """Where the sign-in was started from: the card's task, the setup of a draft, the connection, else Apps."""
    if interaction is not None:
        return WayBack(url_for("board.task", issue_id=interaction.issue_id), "Back to the task")
    if connection is not None and connection.status == "draft":
        # The kept setup itself, where its method and identity can be changed before trying again.
        return WayBack(
            url_for("apps.connect", slug=connection.app_slug, draft_id=connection.id), "Back to the setup"
        )
    if connection is not None and connection.status != "archived":
        return WayBack(url_for("apps.permissions", connection_id=connection.id), f"Back to {connection.name}")
    return WayBack(url_for("apps.catalog"), "Back to Apps")


def failed(
    message: str,
    status: int,
    *,
    connection: ToolConnection | None = None,
    app: AppDefinition | None = None,
    interaction: ThreadInteraction | None = None,
) -> ResponseReturnValue:
    """A callback that connected nothing; "Try again" starts a new sign-in for the same connection."""
    retry = connection is not None and connection.status != "archived" and interaction is None
    return (
        render_template(
            "oauth/failed.html",
            title=NOT_FINISHED_TITLE,
            message=message,
            connection=connection if retry else None,
            app=app,
            back=way_back(connection, interaction),
        ),
        status,
    )


def start_failed(
    err: ServiceError,
    connection: ToolConnection,
    app: AppDefinition | None,
    interaction: ThreadInteraction | None,
) -> ResponseReturnValue:
    """A sign-in that never reached the provider (no OAuth client, no authorization server, no permission)."""
    return (
        render_template(
            "oauth/failed.html",
            title=START_FAILED_TITLE,
            message=err.message,
            connection=None,
            app=app,
            back=way_back(connection, interaction),
        ),
        err.status,
    )
