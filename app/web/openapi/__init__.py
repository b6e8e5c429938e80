"""`GET /api/openapi.json`: an OpenAPI 3.1 description of every JSON route, built from the models that validate them.

`OPERATIONS` is the registry: one entry per (Flask endpoint, method) with its path, summary, security, the request
body model imported from the route module (the very class `parse_body` validates with, so the document cannot say
one thing while the route checks another), and the response schemas. `tests/web/openapi/test_openapi.py` fails when a JSON route
in `app.url_map` (under `/api/`, `/runtime-tools/`, `/mcp/`) has no entry in `registry`, or an entry names no route.

The response models below describe what the views return; they are documentation and the basis of the schemathesis
conformance checks, never used to build responses.

Modules: `responses` (the response models), `registry` (`OPERATIONS`: one entry per route and method),
`document` (building the document, its route, and the drift checks).
"""
