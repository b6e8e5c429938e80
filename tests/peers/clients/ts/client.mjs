// The official MCP TypeScript SDK client against one Switchboard door, once per protocol revision.
// Usage: node client.mjs '<json>' with {url, token, revisions: [...], tool, arguments, unknownTool?}.
// For each revision: initialize (asking for that revision), tools/list, tools/call, and, when `unknownTool` is set,
// a call of that unknown tool, whose error is reported as the SDK surfaced it. Prints one JSON object per revision.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const spec = JSON.parse(process.argv[2]);

function describe(err) {
  return { kind: err?.constructor?.name ?? typeof err, code: err?.code ?? null, message: String(err?.message ?? err) };
}

async function one(revision) {
  const report = { revision };
  const transport = new StreamableHTTPClientTransport(new URL(spec.url), {
    requestInit: { headers: { Authorization: `Bearer ${spec.token}` } },
  });
  // The SDK always asks for its newest revision; ask for `revision` instead by rewriting the initialize request.
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (message.method === "initialize") message.params.protocolVersion = revision;
    return send(message, options);
  };
  const client = new Client({ name: "switchboard-ts-peer", version: "1" });
  client.onerror = (err) => {
    (report.transportErrors ??= []).push(describe(err));
  };
  try {
    await client.connect(transport);
    report.negotiated = transport.protocolVersion ?? null;
    report.server = client.getServerVersion();
    report.sessionId = transport.sessionId ?? null;
    report.tools = (await client.listTools()).tools.map((t) => t.name);
    const called = await client.callTool({ name: spec.tool, arguments: spec.arguments });
    report.call = { isError: called.isError ?? false, text: called.content?.[0]?.text ?? null };
    if (spec.unknownTool) {
      try {
        const odd = await client.callTool({ name: spec.unknownTool, arguments: {} });
        report.unknown = { result: odd };
      } catch (err) {
        report.unknown = describe(err);
      }
      // The session is still usable after the error.
      report.afterError = (await client.listTools()).tools.length;
    }
  } catch (err) {
    report.failure = describe(err);
  } finally {
    await client.close().catch(() => {});
  }
  return report;
}

for (const revision of spec.revisions) {
  console.log(JSON.stringify(await one(revision)));
}
