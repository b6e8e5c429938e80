"""The app definition schema: what one `app/catalog/definitions/<slug>.json` file may say.

Every model refuses unknown keys, so a typo in a definition fails ingestion instead of being ignored. Checks that
span several keys (a required field needs a placeholder, an API-key method needs a key placement, ...) raise
`DefinitionError` with the path of the offending key, so the loader can report `file: path.to.key: message`.

Validation context (optional, passed by the loader): `{"file_stem": "<slug>"}` makes the slug match the file name;
`{"check_files": False}` skips the logo file check (used when re-reading the cached catalog, already checked at
ingest).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlparse

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"
LOGO_PREFIX = "/static/img/apps/"
TEMPLATE_TEXT_MAX_LENGTH = 2000
TEMPLATE_ID_MAX_LENGTH = 160

SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
FIELD_KEY_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"

Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN, max_length=80)]
FieldKey = Annotated[str, StringConstraints(pattern=FIELD_KEY_PATTERN, max_length=80)]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]
LongText = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=TEMPLATE_TEXT_MAX_LENGTH)
]
TemplateId = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=TEMPLATE_ID_MAX_LENGTH)
]

AuthKind = Literal["oauth", "api_key", "none"]
# How Switchboard talks to the provider's MCP server: "mcp_remote" is Streamable HTTP (the current MCP transport);
# "sse" is the older HTTP+SSE transport (a GET event stream plus POSTed messages), for providers that offer only it.
Transport = Literal["mcp_remote", "sse"]
GrantKind = Literal["organization", "user", "agent"]
FieldType = Literal["text", "password", "textarea", "select", "checkbox", "url"]


class DefinitionError(ValueError):
    """A rule that spans keys failed; `path` names the key (relative to the model that raised it)."""

    def __init__(self, path: tuple[str | int, ...], message: str):
        super().__init__(message)
        self.path = path
        self.message = message


URL_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Headers a configuration value may never set: credentials, routing and framing belong to Switchboard.
FORBIDDEN_CONFIG_HEADERS = {
    "authorization",
    "cookie",
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "mcp-session-id",
    "mcp-protocol-version",
    "proxy-authorization",
}


def _check_url(value: str | None, *, https_only: bool) -> str | None:
    if value is None:
        return None
    parsed = urlparse(value)
    schemes = ("https",) if https_only else ("https", "http")
    if parsed.scheme not in schemes or not parsed.netloc:
        raise ValueError("must be an https URL" if https_only else "must be an http(s) URL")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldOption(_Strict):
    value: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    label: Text


class FieldValidation(_Strict):
    pattern: str | None = None
    maxLength: int | None = Field(default=None, gt=0)

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression ({exc})") from None
        return value


class ConfigField(_Strict):
    """One input of a connection method: a credential, a tenant setting, or an extension setting."""

    key: FieldKey
    label: Text
    type: FieldType
    required: bool = False
    secret: bool = False
    placeholder: Text | None = None
    helpText: LongText | None = None
    defaultValue: str | bool | None = None
    validation: FieldValidation = Field(default_factory=FieldValidation)
    options: list[FieldOption] | None = None
    # A tool argument this (public tenant) field pins: the gateway overrides the caller's value with the configured
    # one and hides the argument from the agent-visible schema (e.g. Honcho's workspaceId -> workspace_id).
    toolArgument: (
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=80)] | None
    ) = None
    # The value the member enters here is the provider's MCP server address (a custom server's URL, a tenant's base
    # URL). At most one field of a method says so, and it must be a non-secret URL field (see `Method`).
    serverUrl: bool = False
    # A public tenant field whose value fills `{<urlVariable>}` in the method's default server URL (an MCP Registry
    # remote's URL template, e.g. https://{tenant}.example.com/mcp). Values are one URL label or path segment.
    urlVariable: (
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=80)] | None
    ) = None
    # A public tenant field sent as this request header on every call to the provider (a registry remote's
    # non-secret header).
    header: (
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", max_length=100)] | None
    ) = None

    @property
    def is_public(self) -> bool:
        """Public fields may appear in agent-visible context; secret and password fields never do."""
        return not self.secret and self.type != "password"

    @model_validator(mode="after")
    def _consistent(self) -> ConfigField:
        if self.required and self.placeholder is None:
            raise DefinitionError(("placeholder",), "required fields need a placeholder")
        if self.type == "password" and not self.secret:
            raise DefinitionError(("secret",), "password fields must be secret")
        if self.type == "select" and not self.options:
            raise DefinitionError(("options",), "select fields need options")
        if self.type != "select" and self.options is not None:
            raise DefinitionError(("options",), "only select fields take options")
        if self.type == "checkbox" and not isinstance(self.defaultValue, bool | None):
            raise DefinitionError(("defaultValue",), "a checkbox default must be true or false")
        if self.type != "checkbox" and isinstance(self.defaultValue, bool):
            raise DefinitionError(("defaultValue",), "only checkbox defaults may be true or false")
        if self.serverUrl and (self.type != "url" or self.secret):
            raise DefinitionError(("serverUrl",), "the server URL field must be a non-secret url field")
        if (self.urlVariable or self.header) and not self.is_public:
            raise DefinitionError(
                ("header" if self.header else "urlVariable",), "only public fields can be sent"
            )
        if self.header and self.header.lower() in FORBIDDEN_CONFIG_HEADERS:
            raise DefinitionError(("header",), f"the {self.header} header is not a configuration value")
        return self


class MethodDefaults(_Strict):
    serverUrl: str | None = None
    scopes: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] = Field(
        default_factory=list
    )
    dynamicClientRegistration: bool = False

    @field_validator("serverUrl")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        # A URL template's `{variables}` are checked as if filled with a plain label.
        _check_url(URL_VARIABLE.sub("x", value) if value else value, https_only=False)
        return value


class KeyPlacement(_Strict):
    location: Literal["header", "query"]
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+$", max_length=100)]
    prefix: str = ""


class Method(_Strict):
    """One way to connect an app (OAuth, an API key, or no auth), with the fields its setup form asks for."""

    key: Slug
    label: Text
    transport: Transport
    auth: AuthKind
    grantKinds: list[GrantKind] = Field(min_length=1)
    whenToUse: LongText | None = None
    defaults: MethodDefaults = Field(default_factory=MethodDefaults)
    credentialFields: list[ConfigField] = Field(default_factory=list)
    tenantFields: list[ConfigField] = Field(default_factory=list)
    extensionFields: list[ConfigField] = Field(default_factory=list)
    keyPlacement: KeyPlacement | None = None

    @property
    def all_fields(self) -> list[ConfigField]:
        return [*self.credentialFields, *self.tenantFields, *self.extensionFields]

    @property
    def server_url_field(self) -> ConfigField | None:
        """The field whose value is the MCP server address, when the definition marks one."""
        return next((f for f in self.all_fields if f.serverUrl), None)

    @property
    def public_fields(self) -> list[ConfigField]:
        """Tenant and extension fields that are neither secret nor passwords: the instruction context."""
        return [f for f in (*self.tenantFields, *self.extensionFields) if f.is_public]

    @model_validator(mode="after")
    def _consistent(self) -> Method:
        if len(set(self.grantKinds)) != len(self.grantKinds):
            raise DefinitionError(("grantKinds",), "duplicate grant kind")
        if self.auth == "api_key" and self.keyPlacement is None:
            raise DefinitionError(("keyPlacement",), "api_key methods need a keyPlacement")
        seen: set[str] = set()
        server_url: tuple[str, int] | None = None
        for group in ("credentialFields", "tenantFields", "extensionFields"):
            for index, field in enumerate(getattr(self, group)):
                if field.key in seen:
                    raise DefinitionError((group, index, "key"), f"duplicate field key {field.key!r}")
                seen.add(field.key)
                if field.serverUrl:
                    if server_url is not None:
                        raise DefinitionError(
                            (group, index, "serverUrl"), "only one field of a method can be the server URL"
                        )
                    if self.auth == "oauth" and group == "credentialFields":
                        # OAuth asks for no credentials before sign-in, so the address must be configuration.
                        raise DefinitionError(
                            (group, index, "serverUrl"), "an OAuth method's server URL must be a tenant field"
                        )
                    server_url = (group, index)
        template_variables = set(URL_VARIABLE.findall(self.defaults.serverUrl or ""))
        filled = {f.urlVariable for f in self.tenantFields if f.urlVariable}
        if any(f.urlVariable for f in (*self.credentialFields, *self.extensionFields)):
            raise DefinitionError(("credentialFields",), "only tenant fields fill URL variables")
        if filled - template_variables:
            raise DefinitionError(
                ("tenantFields",), "a urlVariable names no {variable} of the default server URL"
            )
        if template_variables - filled:
            raise DefinitionError(
                ("defaults", "serverUrl"), "every {variable} of the server URL needs a field"
            )
        return self


class Branding(_Strict):
    logoUrl: str
    darkLogoUrl: str | None = None

    @field_validator("logoUrl", "darkLogoUrl")
    @classmethod
    def _logo_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not value.startswith(LOGO_PREFIX) or ".." in value or "\\" in value:
            raise ValueError(f"must be a path under {LOGO_PREFIX}")
        check_files = (info.context or {}).get("check_files", True)
        if check_files and not (STATIC_DIR / value.removeprefix("/static/")).is_file():
            raise ValueError(f"no such file: static/{value.removeprefix('/static/')}")
        return value


class AgentInstructionsTemplate(_Strict):
    """A catalog default for connection instructions; `template_default` turns it into a saved setting."""

    id: TemplateId
    version: int = Field(gt=0)
    text: LongText


class AppDefinition(_Strict):
    schemaVersion: Literal[1]
    slug: Slug
    name: Text
    description: Text
    categories: list[Annotated[str, StringConstraints(pattern=SLUG_PATTERN, max_length=40)]]
    featured: bool = False
    branding: Branding
    docsUrl: str | None = None
    methods: list[Method] = Field(min_length=1)
    agentInstructions: AgentInstructionsTemplate | None = None
    # How long a gateway tool call waits for this provider; unset: SWITCHBOARD_PROVIDER_CALL_TIMEOUT_SECONDS.
    callTimeoutSeconds: float | None = Field(default=None, gt=0, le=600)

    @field_validator("slug")
    @classmethod
    def _slug_matches_file(cls, value: str, info: ValidationInfo) -> str:
        stem = (info.context or {}).get("file_stem")
        if stem is not None and value != stem:
            raise ValueError(f"must equal the file name ({stem!r})")
        return value

    @field_validator("docsUrl")
    @classmethod
    def _docs_url(cls, value: str | None) -> str | None:
        return _check_url(value, https_only=True)

    @model_validator(mode="after")
    def _unique_methods(self) -> AppDefinition:
        seen: set[str] = set()
        for index, method in enumerate(self.methods):
            if method.key in seen:
                raise DefinitionError(("methods", index, "key"), f"duplicate method key {method.key!r}")
            seen.add(method.key)
        return self

    def method(self, key: str | None) -> Method:
        """The method with this key, else the first method (how saved connections pick theirs; `methods` is
        validated non-empty)."""
        for method in self.methods:
            if method.key == key:
                return method
        return self.methods[0]
