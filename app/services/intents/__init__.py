"""Connection intents: the task-thread card an agent opens when it needs a service connected.

Lifecycle: `create_connection_intent` (create, reuse or supersede a pending card), `set_phase` while pending, then
exactly one resolution: `complete_intent` (connected) or `decline_intent` (declined), each writing a continuation
outbox row in the same transaction; or expiry when the task closes or changes hands (`expire_intents_for_issue`).

Payloads carry only service identity, requesting-agent identity and a safe phase: never credentials or URLs beyond
the logo path. The database enforces one pending card per idempotency key; the service handles the conflict.

Modules: `card` (the card itself: kind, texts, payload), `card_state` (what a card is now, for every place that
shows it), `service` (which service a card asks for), `access_requests` (a card asking for more tools of a
connection), `creation` (create, reuse or supersede a pending card), `audience` (who the chosen connection serves),
`resolution` (the addressed person's side: phase, complete, decline), `expiry`, `setup` (the setup flow a card
hosts). The card a draft belongs to is `connections.card_binding`'s; every status a card takes is written by
`services.cards`, which owns the card of every kind.
"""
