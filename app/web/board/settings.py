"""Personal settings: board API keys (shown once, stored hashed, revocable)."""

from flask import redirect, render_template, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user

from app.services.accounts import create_api_key, list_api_keys, revoke_api_key
from app.web.board import bp
from app.web.context import current_membership, parse_uuid
from app.web.forms import ApiKeyForm, EmptyForm


@bp.get("/settings/api-keys")
def api_keys() -> ResponseReturnValue:
    current_membership()
    return render_template(
        "board/api_keys.html",
        keys=list_api_keys(current_user),
        form=ApiKeyForm(formdata=None),
        revoke_form=EmptyForm(formdata=None),
        new_token=None,
    )


@bp.post("/settings/api-keys")
def create_key() -> ResponseReturnValue:
    current_membership()
    form = ApiKeyForm()
    new_token = None
    status = 422
    if form.validate_on_submit():
        _key, new_token = create_api_key(current_user, form.name.data)
        status = 201
    return render_template(
        "board/api_keys.html",
        keys=list_api_keys(current_user),
        form=form,
        revoke_form=EmptyForm(formdata=None),
        new_token=new_token,
    ), status


@bp.post("/settings/api-keys/<key_id>/revoke")
def revoke_key(key_id: str) -> ResponseReturnValue:
    form = EmptyForm()
    if form.validate_on_submit():
        revoke_api_key(current_user, parse_uuid(key_id))
    return redirect(url_for("board.api_keys"), code=303)
