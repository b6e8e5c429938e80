"""Sign-in and sign-out."""

from flask import Blueprint, redirect, render_template, request, session, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required, login_user, logout_user

from app.core import metrics
from app.core.errors import TooManyRequests
from app.services.accounts import authenticate, end_sessions, safe_next
from app.services.login_throttle import ThrottleUnavailable
from app.web.forms import EmptyForm, LoginForm
from app.web.unit_of_work import Reason, commit_point

bp = Blueprint("auth", __name__)


@bp.route("/login", methods=["GET", "POST"])
def login() -> ResponseReturnValue:
    next_url = safe_next(request.values.get("next"), url_for("board.home"))
    if current_user.is_authenticated:
        return redirect(next_url)
    form = LoginForm()
    if not form.validate_on_submit():
        status = 422 if request.method == "POST" else 200
        return render_template("auth/login.html", form=form, next_url=next_url), status
    try:
        user = authenticate(form.email.data, form.password.data, request.remote_addr)
    except TooManyRequests as err:
        commit_point(Reason.SIGN_IN_ATTEMPT)
        page = render_template("auth/login.html", form=form, next_url=next_url, error=err.message)
        metrics.count_throttle_refusal("sign_in", 429)
        return page, 429, {"Retry-After": str(err.retry_after)}
    except ThrottleUnavailable as err:
        page = render_template("auth/login.html", form=form, next_url=next_url, error=err.message)
        metrics.count_throttle_refusal("sign_in", 503)
        return page, 503, {"Retry-After": str(err.retry_after)}
    if user is None:
        commit_point(Reason.SIGN_IN_ATTEMPT)
        return render_template(
            "auth/login.html",
            form=form,
            next_url=next_url,
            error="Invalid email or password.",
            wrong_credentials=True,
        ), 401
    login_user(user)
    return redirect(next_url, code=303)


@bp.post("/logout")
@login_required
def logout() -> ResponseReturnValue:
    form = EmptyForm()
    if form.validate_on_submit():
        end_sessions(current_user)
        logout_user()
        # Drop everything else the session carried too (the chosen company, the CSRF secret).
        session.clear()
    return redirect(url_for("auth.login"), code=303)
