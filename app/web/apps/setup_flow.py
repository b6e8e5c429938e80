"""The shared connection setup flow: what `templates/apps/_setup_flow.html` renders, and how its form is read.

Everything the partial shows comes from a `SetupFlow`, so any host (the full-page connect and reconnect routes here, a
task-card dialog later) builds one with `build_setup_flow` and includes the partial; submissions are read with
`read_submission` and handed to the connection services. Credentials are write-only: a flow never carries a
credential value, so a failed submit cannot render one back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from werkzeug.datastructures import MultiDict

from app.catalog.loader import get_method, logo_url
from app.catalog.schema import AppDefinition, Method
from app.core.errors import Forbidden, ProviderRefused, ServiceError, ValidationFailed
from app.models import Membership, ThreadInteraction, ToolConnection
from app.services.access.effective import can_manage_connections
from app.services.agents import agent_names
from app.services.connections.audience import Audience, audience_of
from app.services.connections.settings import UNSET, Unset, public_fields
from app.services.connections.setup import change_draft_choices, require_credentials, start_connection
from app.services.intents.setup import finish_setup
from app.services.oauth.clients import needs_operator_client
from app.services.oauth.errors import SignInNotConfigured
from app.web.unit_of_work import Reason, commit_point

ORGANIZATION_EXPLANATION = (
    "Only people who can manage connections can connect an app for the whole organization."
)
IDENTITY_LABELS = {"user": "Just me", "organization": "Organization"}
IDENTITY_HINTS = {
    "user": "Agents act with your own account when you are responsible for their task.",
    "organization": "Agents act with a shared account for everyone in this company.",
}
CREDENTIAL_PREFIX = "credentials-"
CONFIG_PREFIX = "config-"


@dataclass(frozen=True)
class IdentityChoice:
    key: str
    label: str
    hint: str
    allowed: bool
    explanation: str | None = None


@dataclass
class Submission:
    """The values of one posted setup form (credentials only travel inward, to the service)."""

    method_key: str | None
    identity: str
    name: str
    credentials: dict[str, str]
    method_config: dict
    audience: Audience
    draft_id: str | None


@dataclass
class SetupFlow:
    app: AppDefinition
    mode: str  # "connect" or "reconnect"
    action_url: str
    method: Method
    methods: list
    identity: str
    identity_choices: list[IdentityChoice]
    agents: list
    audience: Audience
    method_url: str | None = None
    name: str = ""
    values: dict = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    form_errors: list[str] = field(default_factory=list)
    refusal: str | None = None
    # What kind of refusal (see ProviderRefused.kind) and the host that could not be reached, for its headline.
    refusal_kind: str = "refused"
    refusal_host: str | None = None
    draft: ToolConnection | None = None
    connection: ToolConnection | None = None
    can_submit: bool = True
    # A host that posts the flow with htmx (a dialog) sets the element to swap; the full page relies on hx-boost.
    hx_target: str | None = None
    # Agents a host requires in the audience (the task card's requesting agent): shown checked and not removable.
    locked_agent_ids: frozenset[str] = frozenset()
    # A host that can keep an unfinished setup (the task card) offers Save & exit.
    save_exit: bool = False
    # The chosen method is an OAuth sign-in this installation cannot start (no operator client, no registration).
    needs_admin: bool = False

    @property
    def is_oauth(self) -> bool:
        return self.method.auth == "oauth"

    @property
    def locked(self) -> bool:
        """A reconnect keeps its connection's method and identity. A kept draft does not: after a failed attempt the
        person may change both in place, and a re-submit finishes that same draft with them."""
        return self.mode == "reconnect"

    @property
    def credential_fields(self) -> list:
        return list(self.method.credentialFields)

    @property
    def public_fields(self) -> list:
        return [] if self.mode == "reconnect" else public_fields(self.method)

    @property
    def keeps_stored_credentials(self) -> bool:
        return self.connection is not None and self.connection.status == "active"

    @property
    def logo(self) -> str:
        return logo_url(self.app)

    @property
    def selected_agent_ids(self) -> frozenset[str]:
        return self.audience.agent_id_texts

    @property
    def general_errors(self) -> list[str]:
        """Messages that belong to no rendered field (shown at the top of the form)."""
        shown = {"identity", "agentIds", "name"}
        shown |= {f.key for f in self.credential_fields} | {f.key for f in self.public_fields}
        return self.form_errors + [m for k, m in self.errors.items() if k not in shown]


def identity_choices(membership: Membership, method: Method) -> list[IdentityChoice]:
    choices = []
    for kind in ("user", "organization"):
        if kind not in method.grantKinds:
            continue
        allowed = kind != "organization" or can_manage_connections(membership)
        choices.append(
            IdentityChoice(
                key=kind,
                label=IDENTITY_LABELS[kind],
                hint=IDENTITY_HINTS[kind],
                allowed=allowed,
                explanation=None if allowed else ORGANIZATION_EXPLANATION,
            )
        )
    return choices


def build_setup_flow(
    membership: Membership,
    app_definition: AppDefinition,
    *,
    action_url: str,
    method_key: str | None = None,
    mode: str = "connect",
    method_url: str | None = None,
    submission: Submission | None = None,
    draft: ToolConnection | None = None,
    connection: ToolConnection | None = None,
    errors: dict[str, str] | None = None,
    form_errors: list[str] | None = None,
    refusal: str | None = None,
    refusal_kind: str = "refused",
    refusal_host: str | None = None,
    hx_target: str | None = None,
    audience: Audience | None = None,
) -> SetupFlow:
    """Everything the setup partial needs, from the app definition, the person, and any kept draft or submission."""
    fixed = draft or connection
    # A reconnect keeps its connection's method; a kept draft shows the method just chosen (after a failed attempt
    # the person may switch), else its own.
    if connection is not None:
        method = get_method(app_definition, connection.method_key)
    else:
        method = get_method(app_definition, method_key or (draft.method_key if draft else None))
    choices = identity_choices(membership, method)
    kept_identity = (fixed.config or {}).get("identity", "organization") if fixed is not None else None
    if connection is not None:
        identity = kept_identity or "organization"
    elif submission is not None and submission.identity in {c.key for c in choices}:
        identity = submission.identity
    elif kept_identity in {c.key for c in choices}:
        identity = kept_identity or "user"
    else:
        identity = next((c.key for c in choices if c.allowed), "user")
    # A host that keeps the audience elsewhere (a card keeps its own) passes it; a submission always wins.
    if submission is not None:
        audience, values, name = submission.audience, submission.method_config, submission.name
    elif fixed is not None:
        audience, values, name = audience or audience_of(fixed), fixed.method_config, fixed.name
    else:
        audience, values, name = audience or Audience(all_agents=True), {}, ""
    return SetupFlow(
        app=app_definition,
        mode=mode,
        action_url=action_url,
        method=method,
        methods=list(app_definition.methods),
        identity=identity,
        identity_choices=choices,
        agents=agent_names(membership.company_id),
        audience=audience,
        method_url=method_url,
        name=name,
        values=values,
        errors=errors or {},
        form_errors=form_errors or [],
        refusal=refusal,
        refusal_kind=refusal_kind,
        refusal_host=refusal_host,
        draft=draft,
        connection=connection,
        can_submit=membership.has_write_access,
        hx_target=hx_target,
        needs_admin=needs_operator_client(app_definition.slug, method),
    )


def _agent_ids(values: list[str]) -> tuple[uuid.UUID, ...]:
    ids = []
    for value in values:
        try:
            ids.append(uuid.UUID(value))
        except ValueError:
            continue  # not an id at all: nothing to select
    return tuple(dict.fromkeys(ids))


def read_submission(form: MultiDict, method: Method, *, reconnect: bool = False) -> Submission:
    """Read the posted setup form for `method`: declared fields only, credentials kept apart from public values."""
    credentials = {
        f.key: form.get(CREDENTIAL_PREFIX + f.key, "")
        for f in method.credentialFields
        if form.get(CREDENTIAL_PREFIX + f.key, "").strip()
    }
    method_config: dict = {}
    if not reconnect:
        for f in public_fields(method):
            name = CONFIG_PREFIX + f.key
            if f.type == "checkbox":
                method_config[f.key] = form.get(name) in ("on", "true", "1")
            elif name in form:
                method_config[f.key] = form.get(name, "")
    selected = form.get("audience") == "selected"
    return Submission(
        method_key=form.get("method_key") or None,
        identity=form.get("identity") or "user",
        name=(form.get("name") or "").strip(),
        credentials=credentials,
        method_config=method_config,
        audience=Audience(not selected, _agent_ids(form.getlist("agent_ids")) if selected else ()),
        draft_id=form.get("draft_id") or None,
    )


@dataclass
class SetupStep:
    """What one submit of the setup flow achieved: a finished connection, or a draft waiting for OAuth sign-in
    (with the public values and audience the host must save on it before navigating; UNSET when already saved)."""

    connection: ToolConnection
    needs_sign_in: bool
    method_config: dict | None | Unset = UNSET
    audience: Audience | Unset = UNSET


def start_or_resume_draft(
    membership: Membership,
    app_definition: AppDefinition,
    method: Method,
    submission: Submission,
    draft: ToolConnection | None,
    *,
    draft_audience: Audience | None = None,
    check_before_draft: bool = True,
) -> SetupStep:
    """The first half of a submit, shared by both hosts (the Apps page and the task-card dialog).

    A new draft is committed before the provider is contacted, so a refused key keeps it for the next submit. A kept
    draft follows the method and identity of the form (the person may switch after a failed attempt; the connection
    service decides what that changes); its public values and audience follow the form too (returned as pending).
    OAuth methods report `needs_sign_in`: the host saves the pending settings and starts the provider sign-in.
    A submit that would be refused without contacting the provider (a required key left empty, a sign-in this
    installation cannot start) is refused before any draft is made (`check_before_draft`; the card's Save & exit
    keeps its choices without them).
    """
    if draft is None:
        if check_before_draft:
            # What would refuse the submit anyway refuses it before a draft exists: nothing is left behind.
            if needs_operator_client(app_definition.slug, method):
                raise SignInNotConfigured(app_definition.name)
            require_credentials(method, submission.credentials)
        draft = start_connection(
            membership,
            app_definition,
            method_key=method.key,
            identity=submission.identity,
            name=submission.name or None,
            method_config=submission.method_config,
            # A card's draft gets no audience of its own: the card keeps the one chosen.
            audience=draft_audience or submission.audience,
        )
        commit_point(Reason.DRAFT_BEFORE_VERIFY)
        return SetupStep(draft, method.auth == "oauth")
    change_draft_choices(
        membership, draft, app_definition, method_key=method.key, identity=submission.identity
    )
    # Like a new draft, the changed one is kept before the provider is contacted: a refused key does not undo it.
    commit_point(Reason.DRAFT_BEFORE_VERIFY)
    return SetupStep(draft, method.auth == "oauth", submission.method_config, submission.audience)


# What a setup submission can be refused with; the host renders the flow again (draft kept) with `refusal_view`.
SETUP_REFUSALS = (ValidationFailed, ProviderRefused, Forbidden)


def refusal_view(err: ServiceError) -> tuple[int, dict]:
    """The status and the flow arguments that show a refusal: field errors, the provider's answer, or a form error."""
    if isinstance(err, ValidationFailed):
        return 422, {"errors": err.field_messages()}
    if isinstance(err, ProviderRefused):
        return 422, {"refusal": err.message, "refusal_kind": err.kind, "refusal_host": err.host}
    return 403, {"form_errors": [err.message]}


def finish_step(
    membership: Membership,
    app_definition: AppDefinition,
    step: SetupStep,
    submission: Submission,
    *,
    card_id: uuid.UUID | None = None,
) -> ThreadInteraction | None:
    """The second half for API-key methods: verify the credentials, store them, index tools, activate. A card's
    draft resolves its card in the same transaction (returned; the host delivers its continuation after commit)."""
    return finish_setup(
        membership,
        step.connection,
        app_definition,
        credentials=submission.credentials,
        method_config=step.method_config,
        audience=step.audience,
        card_id=card_id,
    )
