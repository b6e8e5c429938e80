"""The board JSON API under /api: session cookie plus CSRF header, or `Authorization: Bearer <api key>`."""

from app.web.blueprints import signed_in_blueprint

bp = signed_in_blueprint("api", __name__, url_prefix="/api")


from app.web.api import access, connections, intents, run_decisions, tasks  # noqa: E402,F401
