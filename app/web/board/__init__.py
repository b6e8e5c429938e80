"""The board: pages for the signed-in members of a company."""

from flask import Blueprint, g
from flask_login import login_required

bp = Blueprint("board", __name__)


@bp.before_request
@login_required
def _require_login() -> None:
    return None


@bp.app_context_processor
def _inject_company() -> dict:
    return {"membership": g.get("membership"), "memberships": g.get("memberships") or []}


from app.web.board import activity, agents, home, members, runs, settings, tasks  # noqa: E402,F401
