"""Provider call overhead: the gateway's provider client, baseline revision vs now, against a real MCP peer.

    .venv/bin/python bench/calls.py [--calls 100] [--baseline-rev ebc3788] [--fresh-rev 4d51cdf]

Starts the notes peer (`tests/peers/mcp_servers.py`, built with the official MCP SDK) in a separate process, then
times one call of its `get_note` tool, taking turns call by call (so noise lands on every variant):

- `direct, open session`: the official SDK client on one session kept open (what the provider itself costs);
- `direct, new session`: the SDK client opening a session per call (initialize, call, close);
- `baseline call_tool`: `call_tool` (then `app/services/connections/provider_mcp.py`) as it was at `--baseline-rev` (loaded
  from git: an event loop and an SSL context per call);
- `session per call`: the same function at `--fresh-rev` (one loop per process, but a fresh MCP session per call:
  initialize, initialized, the call, and for a stateful provider the GET stream and DELETE);
- `current call_tool (pooled)`: the same function now (a pooled session per URL and credential, `session_pool`).

No database is involved: this is the client side of hot path 1, step 7. Prints the median and p90 milliseconds and
each variant's ratio to the open session. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gateway_rows import OpenSession, peer_process  # noqa: E402  (bench/gateway_rows.py, beside this file)
from hot_paths import module_at, percentile  # noqa: E402  (bench/hot_paths.py, beside this file)

PEER = """
import sys, threading
from tests.peers.mcp_servers import start_notes_server
server = start_notes_server()
print(server.url, flush=True)
threading.Event().wait()
"""


def new_session_call(url: str, headers: dict, name: str, arguments: dict):
    import anyio
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def once():
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool(name, arguments)

    return anyio.run(once)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=100, help="timed calls per variant")
    parser.add_argument("--baseline-rev", default="ebc3788")
    parser.add_argument("--fresh-rev", default="4d51cdf", help="the last revision with a session per call")
    args = parser.parse_args(argv)

    from app.adapters.providers import mcp_client
    from app.adapters.providers.client import CLIENT
    from tests.peers.mcp_servers import NOTES_KEY

    with peer_process(PEER) as url:
        headers = {"Authorization": f"Bearer {NOTES_KEY}"}
        tool, arguments = "get_note", {"note_id": "n1"}
        old = module_at(args.baseline_rev, "app/services/connections/provider_mcp.py")
        fresh = module_at(args.fresh_rev, "app/services/connections/provider_mcp.py")
        session = OpenSession(url, headers)  # closed in the task that opened it (below)
        variants = {
            "direct, open session": lambda: session.call(tool, arguments),
            "direct, new session": lambda: new_session_call(url, headers, tool, arguments),
            "baseline call_tool": lambda: old.call_tool(
                url, headers=headers, tool_name=tool, arguments=arguments
            ),
            "session per call": lambda: fresh.call_tool(
                url, headers=headers, tool_name=tool, arguments=arguments
            ),
            "current call_tool (pooled)": lambda: mcp_client.call_tool(
                url, headers=headers, tool_name=tool, arguments=arguments
            ),
        }
        try:
            for variant in variants.values():
                for _ in range(3):
                    variant()  # warm
            timings: dict[str, list[float]] = {label: [] for label in variants}
            for _ in range(args.calls):
                for label, variant in variants.items():
                    t0 = time.perf_counter()
                    variant()
                    timings[label].append((time.perf_counter() - t0) * 1000)
        finally:
            session.close()
            CLIENT.close()
        floor = statistics.median(timings["direct, open session"])
        print(f"peer {url}; {args.calls} calls per variant, taking turns; baseline {args.baseline_rev}")
        print(f"{'variant':28} {'median ms':>10} {'p90 ms':>8} {'x open session':>15}")
        for label, values in timings.items():
            median = statistics.median(values)
            print(f"{label:28} {median:10.1f} {percentile(values, 90):8.1f} {median / floor:15.2f}")
        base, per_call, current = (
            statistics.median(timings[k])
            for k in ("baseline call_tool", "session per call", "current call_tool (pooled)")
        )
        print(f"current/baseline: {current / base:.2f}; current/session per call: {current / per_call:.2f}")


if __name__ == "__main__":
    main()
