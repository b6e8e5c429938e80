"""Tool connections: the shared setup flow (start a draft, verify and finish), reconnect, and configuration changes.

The setup flow is host-agnostic: the full-page Apps connect route and the task-card dialog both call these functions.
Provider specifics come from the app definition (methods, fields, key placement), never from the slug.

Modules: `setup` (start, verify, finish, activate), `settings` (fields, instructions, policies, updates),
`endpoint` (where a connection's provider is reached and with which credentials), `tool_index` (the provider's
tools as indexed), `audience` (who a connection serves, installs), `instructions` (agent instructions text),
`provider_*` (the MCP client for providers' servers and its per-provider limits).
"""
