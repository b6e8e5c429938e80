"""The tool gateway: agents call the tools of their granted connections through Switchboard.

Listing and calling both answer from the one access service (`effective_access`) for the run's stored company,
agent and responsible person, kept per audience under the company's access revision (read with the run on every
request, raised by every write to what they read), so a revoked grant, a removed install or a new block policy
takes effect on the next `tools/list` and refuses the next `tools/call`. Nothing here trusts the agent's view of
which connection a tool belongs to: the visible name is looked up again in the map of the current revision.

Visible names (`names`). Model APIs refuse a whole request whose tool names do not match `^[a-zA-Z0-9_-]{1,64}$`,
and agent CLIs put their own prefix before each MCP tool's name, so every listing is named within the budget of the
agent's client: `mcp__gateway__` leaves 50 characters for Claude Code and Codex, Gemini CLI's `mcp_gateway_` 51 (it
cuts names over 63), OpenCode's `gateway_` 56; agents of other adapter types (and external clients) get the
`GATEWAY_TOOL_NAME_BUDGET` setting (24 to 128, by default 50). A tool is shown as `<connection-slug>__<tool>`: the
slug is the connection's name lowercased, every run of characters other than `a-z0-9` turned into one `-`, trimmed
and capped at half the budget after the separator, at most 32 characters (`connection` when nothing is left). When
two connections with tools the agent can see share a slug, each of them ends in `-<first 8 hex of its id>` (within
the same cap), so slugs never collide and only change when a same-named connection with tools appears. A tool's name
is kept when it fits and has only `a-zA-Z0-9_-`; otherwise every other character becomes `_` and the name is cut to
end in `-<8 hex of a hash of the tool's name>` within the budget. Should two tools of a connection still come out
the same, an unchanged name keeps it and the others, in order of their names, hash `<n>:<name>` with the first `n`
that gives a free name; names are worked out among all the tools the agent reaches on the connection, blocked ones
included, so blocking a tool renames none. Names depend only on the names of the connections with tools, the tool
names and the budget: listings and calls of one agent agree, and both are kept per budget. Blocked tools are never
listed (but a call naming one is still refused with a denial, never forwarded).

Action policy. `allow` runs; `block` answers an isError result naming the denial (`tool_blocked`); `ask_first`
puts one `tool_approval` card in the task thread addressed to the run's responsible person and answers isError
`approval_required` with the approval id. Once approved, exactly one retry with the same projected arguments
runs (the card is consumed atomically); the next identical call needs a new approval. A denial refuses the
same call for the rest of the run (`approval_denied`).

Managed arguments. A connection's public tenant configuration can pin tool arguments: the Honcho workspace
(`config.methodConfig.workspaceId`) becomes the `workspace_id` argument of every tool that declares one. The
value is applied after the caller's arguments (a forged value is overwritten) and the argument is removed from
the visible schema (`properties` and `required`). Without a configured value the caller's argument passes
through. Which tenant field pins which argument comes from the field's `toolArgument` in the app definition.
Approvals store a digest of the projected arguments and are compared against the current projection, so
changing the workspace invalidates an approved call (`approved_tool_target_changed`, the provider is never
called).

Provider limits. A call that reaches the provider takes a slot in the provider's bulkhead and passes its circuit
breaker (`adapters.providers.limits`): a full bulkhead answers isError `provider_busy` and an open breaker `provider_paused`
at once, without contacting the provider; a call that outlives its timeout (the app definition's
`callTimeoutSeconds`, else `PROVIDER_CALL_TIMEOUT_SECONDS`) answers `provider_timeout`. No database connection is
held while the provider works.

Rate limits and the loop breaker (`limits`). A connection limits the calls reaching its tools per minute and per
day, per identity, agent, run and tool, write tools apart with lower figures, and refuses the same tool with the
same arguments repeated too often in a run; counted in the database (every server process sees the same counts, a
re-`initialize` resets nothing) and refused as isError `rate_limited` / `loop_detected` with `retryAfterSeconds`.

Activity. Every call writes `tool_gateway.call` (tool, connection, run, decision, duration in ms, the digests of
the projected arguments and of the result) and every `tools/list` `tool_gateway.list`; arguments, results and
credentials are never written. With the answers to the run's approval cards they are the run's decision
timeline (`timeline`).

Modules: `dry_run` (the policy dry run: what a call would do, nothing called), `names` (visible names), `tools` (the run's tool map, cached listings and call targets), `listing` (a
tool's `tools/list` entry, stored with its row, and a run's listing spliced from them), `arguments` (managed arguments, projected schemas,
redaction), `results` (the prepared call, refusals and reason codes), `approval_cards` (ask-first cards the
gateway opens and consumes), `approvals` (the responsible person answering them), `calls` (prepare, contact the
provider, record), `resource_uris` and `resources` (resource links and `resources/read`), `cancellation` (an agent's
cancellation from any server process), `elicitation` (URL-mode elicitation pointing at the connection card), `limits` (rate limits and the loop
breaker), `timeline` (a run's decision timeline).
"""
