"""The board: pages for the signed-in members of a company."""

from flask import g

from app.web.blueprints import signed_in_blueprint

bp = signed_in_blueprint("board", __name__)


@bp.app_context_processor
def _inject_company() -> dict:
    return {"membership": g.get("membership"), "memberships": g.get("memberships") or []}


from app.web.board import activity, agent_runtime, agents, home, members, runs, settings, tasks  # noqa: E402,F401
