// The official MCP TypeScript SDK's OAuth client (issue 29) against Switchboard's gateway.
// Usage: node oauth_client.mjs '<json>' with {url, cookie, companyId, redirect, stateFile, granted, notGranted}.
// The SDK discovers the authorization server from the gateway's 401, registers itself (RFC 7591) and starts the
// authorization-code flow with PKCE; `redirectToAuthorization` plays the person's browser with `cookie` (a signed-in
// Switchboard session): it reads the consent page, posts Allow with the page's CSRF token and takes the code from the
// redirect. Then: tools/list, a call of `granted`, a call of `notGranted`. The client's registration and tokens are
// kept in `stateFile` between runs, as a real client keeps them. Prints one JSON report.
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const spec = JSON.parse(process.argv[2]);
const state = existsSync(spec.stateFile) ? JSON.parse(readFileSync(spec.stateFile, "utf8")) : {};
const report = { browserVisits: 0 };
const save = () => writeFileSync(spec.stateFile, JSON.stringify(state));

function describe(err) {
  return { kind: err?.constructor?.name ?? typeof err, code: err?.code ?? null, message: String(err?.message ?? err) };
}

async function consent(url) {
  report.browserVisits += 1;
  const headers = { Cookie: spec.cookie };
  const page = await fetch(url, { headers, redirect: "manual" });
  if (page.status !== 200) throw new Error(`The consent page answered ${page.status}: the person is not signed in`);
  const html = await page.text();
  const csrf = /name="csrf_token" type="hidden" value="([^"]+)"/.exec(html)[1];
  const body = new URLSearchParams({ csrf_token: csrf, company_id: spec.companyId, decision: "allow" });
  const answer = await fetch(url, { method: "POST", body, headers, redirect: "manual" });
  const location = new URL(answer.headers.get("location"));
  return location.searchParams.get("code");
}

const provider = {
  get redirectUrl() {
    return spec.redirect;
  },
  get clientMetadata() {
    return {
      client_name: "Cursor",
      redirect_uris: [spec.redirect],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  },
  clientInformation: () => state.client,
  saveClientInformation: (info) => {
    state.client = info;
    save();
  },
  tokens: () => state.tokens,
  saveTokens: (tokens) => {
    state.tokens = tokens;
    save();
  },
  saveCodeVerifier: (verifier) => {
    state.verifier = verifier;
  },
  codeVerifier: () => state.verifier,
  redirectToAuthorization: async (url) => {
    state.code = await consent(url.toString());
  },
};

async function connected(retry = true) {
  const transport = new StreamableHTTPClientTransport(new URL(spec.url), { authProvider: provider });
  const client = new Client({ name: "cursor-like", version: "1" });
  try {
    await client.connect(transport);
    return client;
  } catch (err) {
    if (!(err instanceof UnauthorizedError) || !retry || !state.code) throw err;
    await transport.finishAuth(state.code);
    return connected(false);
  }
}

try {
  const client = await connected();
  report.clientId = state.client?.client_id ?? null;
  report.tools = (await client.listTools()).tools.map((t) => t.name);
  const called = await client.callTool({ name: spec.granted, arguments: { query: "release" } });
  report.call = { isError: called.isError ?? false };
  try {
    const refused = await client.callTool({ name: spec.notGranted, arguments: {} });
    report.notGranted = { isError: refused.isError ?? false };
  } catch (err) {
    report.notGranted = describe(err);
  }
  await client.close().catch(() => {});
} catch (err) {
  report.failure = describe(err);
}
console.log(JSON.stringify(report));
