"""Client ID metadata documents (issue 29): a client_id that is a URL is fetched through the outbound guard. Plain
HTTP is accepted only for a host the operator allow-listed (loopback here, as in tests); a document at a private
address is refused; a document must name itself and list its redirect URIs."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sqlalchemy import select

from app.models.assistants import AssistantClient, AssistantGrant
from tests.services.gateway import test_gateway
from tests.web.assistant_oauth.flow import REDIRECT, authorize_query, code_from, consent, exchange, pkce

world = test_gateway.world


@contextmanager
def document_server(make_document):
    """A loopback server answering GET /client.json with `make_document(url)` as JSON; yields the document URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = json.dumps(make_document(url)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{server.server_port}/client.json"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield url
    finally:
        server.shutdown()
        thread.join(timeout=5)


@contextmanager
def allow_listed(app, host="127.0.0.1"):
    saved = app.config.get("OUTBOUND_ALLOWED_HOSTS")
    app.config["OUTBOUND_ALLOWED_HOSTS"] = [host]
    try:
        yield
    finally:
        app.config["OUTBOUND_ALLOWED_HOSTS"] = saved


def good_document(url: str) -> dict:
    return {
        "client_id": url,
        "client_name": "Cursor",
        "client_uri": "https://cursor.example",
        "logo_uri": "https://127.0.0.1:9/logo.png",  # nothing listens there: no logo, no traffic
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "none",
    }


def test_a_metadata_document_client_signs_in(db, world, app):
    with document_server(good_document) as url, allow_listed(app):
        verifier, challenge = pkce()
        page = world.client.get(authorize_query(url, challenge))
        html = page.get_data(as_text=True)
        assert page.status_code == 200 and "Cursor" in html
        assert "<code>127.0.0.1</code>" in html  # the address the description came from
        assert 'cursor.example</code> <small class="muted">(unverified)' in html
        params = code_from(consent(world.client, authorize_query(url, challenge), world.company.id))
        tokens = exchange(world.client, url, params["code"], verifier)
        assert tokens.status_code == 200, tokens.json
    client = db.session.scalars(select(AssistantClient)).one()
    assert (client.client_id, client.kind, client.client_name) == (url, "metadata_document", "Cursor")
    assert db.session.scalars(select(AssistantGrant)).one().client_pk == client.id


def test_a_metadata_document_at_a_private_address_is_refused(db, world, app):
    with document_server(good_document) as url:
        https_url = url.replace("http://", "https://")  # an https client_id whose host is loopback: private
        _verifier, challenge = pkce()
        page = world.client.get(authorize_query(https_url, challenge))
    assert page.status_code == 400 and "Location" not in page.headers
    assert "its address is private or local, which is not allowed" in page.get_data(as_text=True)
    assert db.session.scalars(select(AssistantClient)).first() is None


def test_plain_http_documents_need_the_allow_list(db, world):
    with document_server(good_document) as url:
        _verifier, challenge = pkce()
        page = world.client.get(authorize_query(url, challenge))
    assert page.status_code == 400
    assert "A client_id URL must be an https URL with a path." in page.get_data(as_text=True)


def test_a_document_that_names_another_client_is_refused(db, world, app):
    def impostor(url):
        return {**good_document(url), "client_id": "https://claude.ai/oauth/client.json"}

    with document_server(impostor) as url, allow_listed(app):
        _verifier, challenge = pkce()
        page = world.client.get(authorize_query(url, challenge))
    assert page.status_code == 400
    assert "names a different client_id" in page.get_data(as_text=True)


def test_a_document_with_a_redirect_it_does_not_list_is_never_redirected_to(db, world, app):
    with document_server(good_document) as url, allow_listed(app):
        _verifier, challenge = pkce()
        page = world.client.get(authorize_query(url, challenge, redirect="https://evil.example/cb"))
    assert page.status_code == 400 and "Location" not in page.headers
