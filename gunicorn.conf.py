"""Gunicorn settings for production: `gunicorn -c gunicorn.conf.py wsgi:app`.

Chosen from `bench/server_config.py` on a 2-core machine (figures in `bench/RESULTS.md`): threaded workers (`gthread`)
so that a request waiting on a provider holds one thread, not a whole process. Each process lets one provider have
at most `SWITCHBOARD_PROVIDER_MAX_CONCURRENT_CALLS` calls in flight (4 by default), fewer than its threads, so a
frozen provider leaves most threads to the board and the runtime tools.

Environment overrides: `SWITCHBOARD_BIND` (default `127.0.0.1:8000`), `WEB_CONCURRENCY` (processes) and
`SWITCHBOARD_THREADS` (threads per process).
"""

import os

bind = os.environ.get("SWITCHBOARD_BIND", "127.0.0.1:8000")
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("SWITCHBOARD_THREADS", "8"))

# gthread workers do not time requests out one by one: `timeout` restarts a process whose main loop stops answering
# (a real hang). Requests are bounded by the app's own timeouts: provider calls by
# SWITCHBOARD_PROVIDER_CALL_TIMEOUT_SECONDS (30 s), setup exchanges by OUTBOUND_TIMEOUT_SECONDS (10 s).
timeout = 60
# On restart or shutdown, requests in flight get this long to finish: longer than the default provider call timeout.
graceful_timeout = 35
keepalive = 5

# Access log without query strings, referrers or headers (they can carry codes and tokens): the path (`%(U)s`, not
# the request line `%(r)s` nor `%(q)s`), status, size, milliseconds and user agent.
accesslog = "-"
access_log_format = '%(h)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(B)s %(M)sms "%(a)s"'
errorlog = "-"


# A body over the app's limit is answered 413 without being read. Gunicorn would announce keep-alive on that answer
# and then fail to read the next request behind the unread body, so the client's next request on the connection
# died. The connection is closed instead, and the answer says so (`Connection: close`): a body whose declared length
# is over the limit is marked before the app runs; a streamed one that passes it is closed after its 413.


def _max_content_length(worker) -> int | None:
    config = getattr(worker.wsgi, "config", None)
    return config.get("MAX_CONTENT_LENGTH") if config is not None else None


def pre_request(worker, req):
    limit = _max_content_length(worker)
    declared = next((value for name, value in req.headers if name == "CONTENT-LENGTH"), None)
    if limit is not None and declared is not None and declared.strip().isdigit() and int(declared) > limit:
        req.must_close = True


def post_request(worker, req, environ, resp):
    if resp.status_code == 413:
        resp.force_close()


# Draining (issue 31 item 4). On SIGTERM gunicorn's arbiter closes its copy of the listening socket and passes the
# signal on; each worker stops accepting but kept its own copy open until it exited, so new connections queued behind
# it and hung for the whole drain. Here a worker, on SIGTERM, also marks the app as draining (`/readyz` answers 503,
# a request arriving on a kept-alive connection gets a fast 503 with `Connection: close`) and closes its listening
# sockets from its own event loop, so new connections are refused at once. Requests in flight finish within
# `graceful_timeout`.
# A 2026-07-28 `subscriptions/listen` stream lasts as long as its run, so the worker also tells the open streams,
# which close gracefully at once (the client listens again, on a worker that stays). Gunicorn's own handler still
# runs; installing a handler turns system-call interruption back on for the signal, so it is turned off again.


def post_worker_init(worker):
    import signal

    from app.web.agents import listen
    from app.web.serving_state import begin_drain

    stop = worker.handle_exit

    def drain(sig, frame):
        begin_drain()
        listen.shutting_down.set()
        stop(sig, frame)
        queue = getattr(worker, "method_queue", None)  # gthread's loop runs what is queued there
        if queue is not None:
            queue.defer(_refuse_new_connections, worker)

    signal.signal(signal.SIGTERM, drain)
    signal.siginterrupt(signal.SIGTERM, False)


def _refuse_new_connections(worker):
    worker.set_accept_enabled(False)
    for listener in worker.sockets:
        listener.close()
