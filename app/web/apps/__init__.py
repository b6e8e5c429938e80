"""Apps: the catalog, the shared setup flow page, the Connections list, reconnect, and a connection's Permissions.

Views here are thin: they load (404 across companies), authorize (403), collect form values, and call the connection
and instruction services, which own every rule. Fragments come from the partials under `templates/apps/`.
"""

from app.web.blueprints import signed_in_blueprint

bp = signed_in_blueprint("apps", __name__)


from app.web.apps import (  # noqa: E402,F401
    call_limits,
    catalog,
    connections,
    explain,
    instructions,
    manage,
    permissions,
    setup,
    trust,
)
