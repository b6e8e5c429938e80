"""OpenTelemetry traces of a gateway tools/call (issue 31 item 10), collected with the SDK's in-memory exporter.

The agent is the official MCP SDK client, the provider the real notes peer on loopback; both speak through real HTTP.
Asserted: one SERVER span for the MCP request (MCP / GenAI semantic conventions), continuing the agent's trace from
`params._meta`; one CLIENT span for the provider call under it; the provider received a `traceparent` header of the
same trace; no span carries the call's arguments, results or credentials.

The tracer provider is process-wide and can be set only once, so it is installed on first use with a sampler that
records only while a test holds the `spans` fixture (other tests in the process see non-recording spans).
"""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import SpanKind

from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway.test_gateway import connect, live_server, run_agent  # noqa: F401


class _Switch(Sampler):
    recording = False

    def should_sample(
        self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None
    ):
        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.recording else Decision.DROP, attributes)

    def get_description(self) -> str:
        return "records while a test holds the spans fixture"


_SWITCH = _Switch()
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans():
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(sampler=_SWITCH)
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider and provider.sampler is _SWITCH
    _EXPORTER.clear()
    _SWITCH.recording = True
    yield _EXPORTER
    _SWITCH.recording = False
    _EXPORTER.clear()


@pytest.fixture
def world(make, client, providers):
    return make.task_run(client=client)


def _ours(finished, kind):
    return [s for s in finished if s.instrumentation_scope.name == "switchboard" and s.kind == kind]


def test_a_gateway_call_is_traced_from_the_agent_to_the_provider(db, world, live_server, notes_server, spans):  # noqa: F811
    notes = connect(world, "github", NOTES_KEY)
    notes_server.reset()
    spans.clear()

    async def scenario(session):
        return await session.call_tool("github__search_notes", {"query": "checklist"})

    result = run_agent(live_server, world.token, scenario)
    assert not result.is_error
    finished = spans.get_finished_spans()

    calls = [s for s in _ours(finished, SpanKind.SERVER) if s.attributes["mcp.method.name"] == "tools/call"]
    assert len(calls) == 1
    server = calls[0]
    assert server.name == "tools/call github__search_notes"
    attributes = dict(server.attributes)
    request_id = attributes.pop("jsonrpc.request.id")
    assert request_id.isdigit()
    assert attributes == {
        "mcp.method.name": "tools/call",
        "mcp.protocol.version": "2025-11-25",
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "github__search_notes",
    }
    # The agent's trace continues: the MCP SDK client put its span's context in `params._meta`.
    agent = [
        s
        for s in finished
        if s.instrumentation_scope.name == "mcp-python-sdk"
        and s.kind == SpanKind.CLIENT
        and s.name == "MCP send tools/call github__search_notes"
    ]
    assert len(agent) == 1
    assert server.parent is not None and server.parent.span_id == agent[0].context.span_id
    assert server.context.trace_id == agent[0].context.trace_id

    # Every MCP request of the session has its span on the door (the SDK lists tools before calling one).
    methods = sorted(s.attributes["mcp.method.name"] for s in _ours(finished, SpanKind.SERVER))
    assert methods == ["initialize", "tools/call", "tools/list"]

    providers = _ours(finished, SpanKind.CLIENT)
    assert len(providers) == 1
    provider = providers[0]
    assert provider.name == "tools/call search_notes"
    assert provider.parent is not None and provider.parent.span_id == server.context.span_id
    assert dict(provider.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search_notes",
        "server.address": "127.0.0.1",
        "server.port": notes_server.port,
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "switchboard.connection.id": notes["id"],
    }

    # The provider received the trace context as an HTTP header, and the call's request is a span of this trace.
    trace_id = f"{server.context.trace_id:032x}"
    # initialize, notifications/initialized (a notification: the SDK gives it no trace context) and the call.
    posted = [r.traceparent for r in notes_server.requests if r.method == "POST"]
    assert len(posted) == 3 and posted[1] is None
    received = [t for t in posted if t is not None]
    assert [t.split("-")[1] for t in received] == [trace_id, trace_id]
    sent = [
        s
        for s in finished
        if s.instrumentation_scope.name == "mcp-python-sdk" and s.name == "MCP send tools/call search_notes"
    ]
    assert len(sent) == 1 and sent[0].parent.span_id == provider.context.span_id
    assert received[-1].startswith(f"00-{trace_id}-{sent[0].context.span_id:016x}-")
    assert notes_server.calls[-1] == ("search_notes", {"query": "checklist"})

    # No span of the trace carries the arguments, the result, the run token or the provider's key.
    assert "Release checklist" in result.content[0].text
    for span in finished:
        for value in span.attributes.values():
            assert (
                "checklist" not in str(value)
                and NOTES_KEY not in str(value)
                and world.token not in str(value)
            )


def test_the_runtime_door_traces_each_request_and_its_error_code(client, world, spans):
    headers = {"Authorization": f"Bearer {world.token}"}
    listed = client.post(
        "/mcp/runtime-tools", json={"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, headers=headers
    )
    assert listed.status_code == 200
    unknown = client.post(
        "/mcp/runtime-tools",
        json={"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "nope", "arguments": {}}},
        headers=headers,
    )
    assert unknown.status_code == 404
    served = sorted(_ours(spans.get_finished_spans(), SpanKind.SERVER), key=lambda s: s.start_time)
    assert [(s.name, dict(s.attributes)) for s in served] == [
        (
            "tools/list",
            {
                "mcp.method.name": "tools/list",
                "jsonrpc.request.id": "7",
                "mcp.protocol.version": "2025-03-26",
                "network.transport": "tcp",
                "network.protocol.name": "http",
            },
        ),
        (
            "tools/call nope",
            {
                "mcp.method.name": "tools/call",
                "jsonrpc.request.id": "8",
                "mcp.protocol.version": "2025-03-26",
                "network.transport": "tcp",
                "network.protocol.name": "http",
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "nope",
                "error.type": "-32601",
                "rpc.response.status_code": "-32601",
            },
        ),
    ]
    assert served[0].parent is None  # no caller context: a trace of its own
    assert served[1].status.status_code.name == "ERROR"
