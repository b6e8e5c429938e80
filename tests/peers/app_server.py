"""A real Switchboard server process for tests that need more than one: `python -m tests.peers.app_server`.

Reads the app's configuration as JSON from `SWITCHBOARD_TEST_APP_CONFIG` (the test app's, so both share one
database and keys), serves it threaded on 127.0.0.1 at a free port, and prints `PORT <n>` once it listens.
"""

from __future__ import annotations

import json
import os

from werkzeug.serving import make_server

from app import create_app


def main() -> None:
    app = create_app(json.loads(os.environ["SWITCHBOARD_TEST_APP_CONFIG"]))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
