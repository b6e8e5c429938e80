"""Activity: the company's append-only log, newest first."""

from flask import render_template, request
from flask.typing import ResponseReturnValue

from app.services.activity import ACTIVITY_PAGE_SIZE, list_activity
from app.web.board import bp
from app.web.board.activity_sentences import load_names, sentence
from app.web.context import current_membership

ACTION_FILTERS = {
    "": "Everything",
    "issue.": "Tasks and connection requests",
    "tool_app.": "App setup",
    "tool_connection.": "Connection settings",
    "tool_gateway.": "Tool calls",
    "run.": "Agent runs",
    "member.": "Members",
    "agent.": "Agents",
}


@bp.get("/activity")
def activity() -> ResponseReturnValue:
    membership = current_membership()
    prefix = request.args.get("action", "")
    if prefix not in ACTION_FILTERS:
        prefix = ""
    rows = list_activity(membership.company_id, action_prefix=prefix or None)
    names = load_names(rows)
    return render_template(
        "board/activity.html",
        rows=[(row, sentence(row, names)) for row in rows],
        names=names.people_and_agents,
        filters=ACTION_FILTERS,
        prefix=prefix,
        page_size=ACTIVITY_PAGE_SIZE,
    )
