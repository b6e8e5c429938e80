"""Board endpoints that answer a tool approval card in a task thread: Approve once, Always allow, and Deny.

Only a person's board session answers: a request that presents a bearer credential (an agent's run token, an API
key) is refused with 403 before anything else, even when a session cookie comes along (an agent
must never answer its own approval).

Button-only POSTs carrying CSRF (an EmptyForm); only the card's addressee may answer (403 otherwise), and
another company's card is a 404. htmx requests get the card fragment back (`interactions/_tool_approval.html`,
the single source of the card); plain form posts are redirected (303) to the task page.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_wtf import FlaskForm
from wtforms import BooleanField, IntegerField, StringField
from wtforms.validators import AnyOf, NumberRange, Optional

from app.core.errors import Forbidden, Unprocessable, ValidationFailed
from app.extensions import htmx
from app.models import Membership, ThreadInteraction
from app.models.trust import TrustScope
from app.services.connections import trust_rules
from app.services.gateway import approvals
from app.web.blueprints import signed_in_blueprint, tells_the_inbox_of_answers
from app.web.context import load_scoped
from app.web.forms import EmptyForm

bp = tells_the_inbox_of_answers(signed_in_blueprint("approvals", __name__))
PEOPLE_ONLY = "Only a person signed in to the board can answer an approval"


def _people_only() -> None:
    if request.headers.get("Authorization", "").strip():
        raise Forbidden(PEOPLE_ONLY)


# First, before the sign-in check: an agent presenting its token gets 403, not a redirect to the login page.
bp.before_request_funcs.setdefault(None, []).insert(0, _people_only)


class AlwaysAllowForm(FlaskForm):
    """The card's "Always allow" choices (the trust rule service checks them again)."""

    scope = StringField(default=TrustScope.TASK, validators=[AnyOf(TrustScope.values())])
    only_these_arguments = BooleanField()
    expires_in = StringField(default="never", validators=[AnyOf(tuple(trust_rules.EXPIRY_CHOICES))])
    max_uses = IntegerField(validators=[Optional(), NumberRange(min=1, max=trust_rules.MAX_USES)])


@bp.app_template_global("can_answer_approval")
def _can_answer_approval(membership: Membership, card: ThreadInteraction) -> bool:
    """The card template asks the approval service (one owner of who may answer) instead of restating the rule."""
    return approvals.can_answer(membership, card)


@bp.app_template_global("can_allow_on_every_task")
def _can_allow_on_every_task(membership: Membership, card: ThreadInteraction) -> bool:
    return trust_rules.can_allow_on_every_task(membership, card)


def _answer(
    interaction_id: str,
    answer: Callable[[Membership, ThreadInteraction], ThreadInteraction],
    form: FlaskForm | None = None,
) -> ResponseReturnValue:
    card, membership = load_scoped(ThreadInteraction, interaction_id)
    card = approvals.load_card(membership.company_id, card.id)
    if form is None and not EmptyForm().validate_on_submit():
        raise Unprocessable("The form is missing its security token")
    answer(membership, card)
    if htmx:
        return render_template("interactions/_tool_approval.html", item=card)
    return redirect(url_for("board.task", issue_id=card.issue_id) + f"#item-{card.id}", code=303)


@bp.post("/approvals/<interaction_id>/approve")
def approve(interaction_id: str) -> ResponseReturnValue:
    return _answer(interaction_id, approvals.approve)


@bp.post("/approvals/<interaction_id>/always-allow")
def always_allow(interaction_id: str) -> ResponseReturnValue:
    """Approve the call and make a trust rule in the scope chosen on the card."""
    form = AlwaysAllowForm()
    if not form.validate_on_submit():
        if "csrf_token" in form.errors:
            raise Unprocessable("The form is missing its security token")
        details = [
            {"loc": [name], "msg": "; ".join(errors), "type": "value_error"}
            for name, errors in form.errors.items()
        ]
        raise ValidationFailed(details)
    choice = trust_rules.RuleChoice(
        scope=form.scope.data or TrustScope.TASK,
        only_these_arguments=bool(form.only_these_arguments.data),
        expires_in=form.expires_in.data or "never",
        max_uses=form.max_uses.data,
    )
    return _answer(
        interaction_id, lambda membership, card: approvals.always_allow(membership, card, choice), form
    )


@bp.post("/approvals/<interaction_id>/deny")
def deny(interaction_id: str) -> ResponseReturnValue:
    return _answer(interaction_id, approvals.deny)
