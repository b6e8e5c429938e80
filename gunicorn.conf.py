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
