"""Company home and company switching."""

from flask import redirect, render_template, request, session, url_for
from flask.typing import ResponseReturnValue
from sqlalchemy import exists, func, select

from app.extensions import db
from app.models import Agent, Issue, ToolConnection
from app.models.connections import ConnectionStatus
from app.services.accounts import safe_next
from app.web.board import bp
from app.web.context import current_membership, membership_for, parse_uuid
from app.web.forms import EmptyForm


@bp.get("/")
def home() -> ResponseReturnValue:
    membership = current_membership()
    counts = dict(
        db.session.execute(
            select(Issue.status, func.count())
            .where(Issue.company_id == membership.company_id)
            .group_by(Issue.status)
        ).all()
    )
    agent_count = db.session.scalar(
        select(func.count()).select_from(Agent).where(Agent.company_id == membership.company_id)
    )
    # The first-run orientation shows until the company has one working connection (a newcomer's first step).
    connected = db.session.scalar(
        select(
            exists().where(
                ToolConnection.company_id == membership.company_id,
                ToolConnection.status == ConnectionStatus.ACTIVE,
            )
        )
    )
    return render_template(
        "board/home.html", counts=counts, agent_count=agent_count, show_orientation=not connected
    )


@bp.post("/companies/<company_id>/switch")
def switch_company(company_id: str) -> ResponseReturnValue:
    form = EmptyForm()
    if form.validate_on_submit():
        membership = membership_for(parse_uuid(company_id))
        session["company_id"] = str(membership.company_id)
    return redirect(safe_next(request.form.get("next"), url_for("board.home")), code=303)
