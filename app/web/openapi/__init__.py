"""`GET /api/openapi.json`: an OpenAPI 3.1 description of every JSON route, built from the models the routes use.

There is no route list to keep: the operations are the routes of `app.url_map` whose view carries a `Doc` (the
decorators of `operations`: summary, security, the request body model, the response models). The body model is the
class the view passes to `parse_body`; the response models are the classes it answers with through
`responses.respond`. So the document cannot say one thing while the route does another, and
`tests/test_openapi.py` fails when a JSON route (under `/api/`, `/runtime-tools/`, `/mcp/`) carries no `Doc`.

The JSON-RPC models (`JsonRpcBody`, `JsonRpcResponse`) describe the MCP doors' messages, which are parsed by
hand and built from the SDK's own types (`app.core.mcp_messages`).

Modules: `operations` (the `Doc` decorators, security schemes, the answers views share), `responses` (the shared
response models, `respond`, `Moment`), `document` (deriving the operations, building and serving the document, the
drift checks).
"""
