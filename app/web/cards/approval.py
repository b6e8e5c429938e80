"""Board endpoints that answer a tool approval card in a task thread: Approve and Deny.

Button-only POSTs carrying CSRF (an EmptyForm); only the card's addressee may answer (403 otherwise), and
another company's card is a 404. htmx requests get the card fragment back (`interactions/_tool_approval.html`,
the single source of the card); plain form posts are redirected (303) to the task page.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import redirect, render_template, url_for
from flask.typing import ResponseReturnValue

from app.core.errors import Unprocessable
from app.extensions import htmx
from app.models import Membership, ThreadInteraction
from app.services.gateway import approvals
from app.web.blueprints import signed_in_blueprint
from app.web.context import load_scoped
from app.web.forms import EmptyForm

bp = signed_in_blueprint("approvals", __name__)


@bp.app_template_global("can_answer_approval")
def _can_answer_approval(membership: Membership, card: ThreadInteraction) -> bool:
    """The card template asks the approval service (one owner of who may answer) instead of restating the rule."""
    return approvals.can_answer(membership, card)


def _answer(
    interaction_id: str, answer: Callable[[Membership, ThreadInteraction], ThreadInteraction]
) -> ResponseReturnValue:
    card, membership = load_scoped(ThreadInteraction, interaction_id)
    card = approvals.load_card(membership.company_id, card.id)
    if not EmptyForm().validate_on_submit():
        raise Unprocessable("The form is missing its security token")
    answer(membership, card)
    if htmx:
        return render_template("interactions/_tool_approval.html", item=card)
    return redirect(url_for("board.task", issue_id=card.issue_id) + f"#item-{card.id}", code=303)


@bp.post("/approvals/<interaction_id>/approve")
def approve(interaction_id: str) -> ResponseReturnValue:
    return _answer(interaction_id, approvals.approve)


@bp.post("/approvals/<interaction_id>/deny")
def deny(interaction_id: str) -> ResponseReturnValue:
    return _answer(interaction_id, approvals.deny)
