"""The assistants' authorization server's endpoints beside the token endpoint: device authorization (RFC 8628),
revocation (RFC 7009, revoking the whole family) and open dynamic client registration (RFC 7591)."""

from __future__ import annotations

from datetime import timedelta

from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint, InvalidRedirectURIError
from authlib.oauth2.rfc8628 import DeviceAuthorizationEndpoint
from flask import g
from sqlalchemy import select

from app.extensions import db
from app.models.assistants import AssistantDeviceCode, AssistantToken
from app.models.base import utcnow
from app.services.assistants import clients, secrets, urls
from app.services.assistants.cleanup import sweep_expired
from app.services.assistants.oauth_objects import (
    AUTH_METHODS,
    DEVICE_INTERVAL,
    IssuedToken,
    OAuthClient,
    check_resource,
    device_ttl,
    revoke_family,
)


class DeviceEndpoint(DeviceAuthorizationEndpoint):
    CLIENT_AUTH_METHODS = AUTH_METHODS
    INTERVAL = DEVICE_INTERVAL

    @property
    def EXPIRES_IN(self) -> int:  # noqa: N802 (Authlib's name)
        return device_ttl()

    def create_endpoint_response(self, request):  # type: ignore[no-untyped-def]
        # The client first (Authlib authenticates it again, a second lookup on a rare door): an unknown client hears
        # only that, whatever else its request says.
        self.authenticate_client(request)
        g.assistant_device_resource = check_resource(request.payload.data.get("resource"))
        return super().create_endpoint_response(request)

    def get_verification_uri(self) -> str:
        return urls.issuer() + "/device"

    def save_device_credential(self, client_id: str, scope: str | None, data: dict) -> None:
        sweep_expired()
        db.session.add(
            AssistantDeviceCode(
                device_code_hash=secrets.digest(data["device_code"]),
                user_code=data["user_code"],
                client_id=client_id,
                scope=scope or urls.SCOPE,
                resource=g.assistant_device_resource,
                interval=data["interval"],
                expires_at=utcnow() + timedelta(seconds=data["expires_in"]),
            )
        )
        db.session.flush()


class Revocation(RevocationEndpoint):
    CLIENT_AUTH_METHODS = AUTH_METHODS

    def query_token(self, token_string: str, token_type_hint: str | None) -> IssuedToken | None:
        digest = secrets.digest(token_string)
        for column, kind in (
            (AssistantToken.access_token_hash, "access_token"),
            (AssistantToken.refresh_token_hash, "refresh_token"),
        ):
            row = db.session.scalars(select(AssistantToken).where(column == digest)).one_or_none()
            if row is not None:
                return IssuedToken(row, kind)
        return None

    def revoke_token(self, token: IssuedToken, request) -> None:  # type: ignore[no-untyped-def]
        revoke_family(token.row.family_id)


class Registration(ClientRegistrationEndpoint):
    """Open registration (MCP clients register themselves); the client is stored with its secret hashed."""

    def authenticate_token(self, request) -> bool:  # type: ignore[no-untyped-def]
        return True

    def get_server_metadata(self) -> dict:
        return urls.authorization_server_metadata()

    def generate_client_id(self, request) -> str:  # type: ignore[no-untyped-def]
        return "sbc_" + secrets.new_secret()[:32]

    def generate_client_secret(self, request) -> str | None:  # type: ignore[no-untyped-def]
        method = request.payload.data.get("token_endpoint_auth_method", "client_secret_basic")
        return None if method == "none" else secrets.new_secret()

    def generate_client_info(self, request) -> dict:  # type: ignore[no-untyped-def]
        info = super().generate_client_info(request)
        if info.get("client_secret") is None:
            info.pop("client_secret", None)
            info.pop("client_secret_expires_at", None)
        return info

    def save_client(self, client_info: dict, client_metadata: dict, request) -> OAuthClient:  # type: ignore[no-untyped-def]
        metadata = dict(client_metadata)
        metadata.setdefault("token_endpoint_auth_method", "client_secret_basic")
        secret = client_info.get("client_secret")
        try:
            row = clients.register_client(
                client_info["client_id"], metadata, secrets.digest(secret) if secret else None
            )
        except clients.ClientRefused as refused:
            raise InvalidRedirectURIError(refused.message) from None
        return OAuthClient(row)
