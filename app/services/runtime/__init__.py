"""The agent runtime tools `connections_search` and `connection_request`, shared by the MCP and REST doors.

Every token use re-validates the run (`load_run_context`: token against run, run still running, responsible person,
task, agent, write access, task ownership, open task), so company, agent, task
and responsible person always come from the signed token plus the stored run, never from the agent's arguments.
Search reads only the stored catalog and tool index (it never contacts providers), and reads a connection's indexed
tool text only after the connection's identity audience check. Readiness comes from the access service
(`effective_access`, or its plain-row form `eligible_access`).

Modules: `descriptor` (tool definitions, guidance, what a run is handed), `context` (the live run behind a
token), `readiness`, `search` (`connections_search`), `request` (`connection_request`), `lookup` (what a request for a
catalog service reads in one statement when none of its connections is ready).
"""
