"""Wakeups become heartbeat runs; runs are claimed, completed and logged; agents keep a session per task.

- `request_wakeup` records a wake. At most one run per agent and task is active (queued or running): a wake that
  arrives while one is active waits (status `queued`) and becomes the next run when the active one ends. Wakes with
  a `connection-intent:` idempotency key are unique while live (a partial unique index); a duplicate raises
  `WakeAlreadyExists`, which callers treat as "already woken".
- `claim_next_run` moves the oldest queued run of an executable agent to `running` (`FOR UPDATE SKIP LOCKED` on
  PostgreSQL, plus a conditional update so no two workers ever start the same run).
- `complete_run` records the outcome, the bounded log (`RunLog`) and the agent's session for the task. It, `fail_run`
  and `close_run` (every path that ends a run) then start the next waiting wake.
- Sessions: `session_for_turn` resumes the stored session only when it was created under the same
  connection-instruction digest and the turn is not a continuation (`forceFreshSession`); otherwise a fresh session.

Modules: `wakeups` (wakes, claiming), `sessions`, `lifecycle` (completion, failure, closing, abandoned runs, logs),
`tokens` (run-bound tokens), `wake_context` (server-owned context fields), `snapshot` (a run's instruction
snapshot and runtime tools), `invocation` (the wake prompt and the invocation an adapter executes).
"""
