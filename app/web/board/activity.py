"""Activity: the company's append-only log, newest first."""

from flask import render_template, request

from app.services.activity import ACTIVITY_PAGE_SIZE, actor_names, list_activity
from app.web.board import bp
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
def activity():
    membership = current_membership()
    prefix = request.args.get("action", "")
    if prefix not in ACTION_FILTERS:
        prefix = ""
    rows = list_activity(membership.company_id, action_prefix=prefix or None)
    return render_template(
        "board/activity.html",
        rows=rows,
        names=actor_names(rows),
        filters=ACTION_FILTERS,
        prefix=prefix,
        page_size=ACTIVITY_PAGE_SIZE,
    )
