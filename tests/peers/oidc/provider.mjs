// A real OpenID Provider (panva/oidc-provider, pinned in package.json) for Switchboard's OAuth tests.
//
//   node provider.mjs <port>            (or OIDC_PORT=<port>; OIDC_ACCESS_TOKEN_TTL=<seconds>, default 3600)
//
// Dynamic client registration (RFC 7591), PKCE S256, resource indicators (RFC 8707), refresh tokens for every client allowed the refresh_token grant,
// token introspection for the MCP peer (static client `mcp-resource`), and devInteractions for login and consent
// (any login and password are accepted; the login page's abort link answers `error=access_denied`).
//
// Test controls under /__test (loopback only, never part of a real provider):
//   GET /__test/stats   -> {registrations, tokenRequests: {<grant_type>: n}, introspections, revocations}
//   GET /__test/reset   -> zero the counters and restore the defaults below
//   GET /__test/config?tokenOutage=503&rotate=false&tokenDelayMs=200
//       tokenOutage: answer every /token request with that status (0 = off); rotate: rotate refresh tokens;
//       tokenDelayMs: hold every /token request this long first (widens race windows in concurrency tests).
import Provider, { errors } from 'oidc-provider';

const port = Number(process.argv[2] || process.env.OIDC_PORT || 9090);
const issuer = `http://127.0.0.1:${port}`;
const accessTokenTtl = Number(process.env.OIDC_ACCESS_TOKEN_TTL || 3600);

export const MCP_RESOURCE_CLIENT = { id: 'mcp-resource', secret: 'mcp-resource-secret' };

const defaults = { tokenOutage: 0, rotate: true, tokenDelayMs: 0 };
const controls = { ...defaults };
let stats;
function resetStats() {
  stats = { registrations: 0, tokenRequests: {}, introspections: 0, revocations: 0 };
}
resetStats();

const config = {
  clients: [
    {
      client_id: MCP_RESOURCE_CLIENT.id,
      client_secret: MCP_RESOURCE_CLIENT.secret,
      redirect_uris: ['http://127.0.0.1/unused'],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return { sub: id, email: `${id}@example.test`, email_verified: true, name: `User ${id}` };
      },
    };
  },
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
  scopes: ['openid', 'offline_access', 'email', 'profile'],
  cookies: { keys: ['switchboard-test-peer-cookie-key'] },
  features: {
    // RFC 8707: a token requested for a resource (an MCP server URL on loopback) is bound to it (`aud`); MCP
    // clients must ask for one. Tokens asked without a resource stay plain (and usable at userinfo).
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => false, // a token request must name the resource itself
      getResourceServerInfo(ctx, resourceIndicator) {
        const url = new URL(resourceIndicator);
        if (url.hostname !== '127.0.0.1' && url.hostname !== 'localhost') throw new errors.InvalidTarget();
        return {
          scope: 'openid offline_access email profile',
          audience: resourceIndicator,
          accessTokenFormat: 'opaque',
          accessTokenTTL: accessTokenTtl,
        };
      },
    },
    devInteractions: { enabled: true },
    registration: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
  },
  pkce: { required: () => false },
  ttl: { AccessToken: accessTokenTtl, AuthorizationCode: 120, RefreshToken: 86400, Grant: 86400, Session: 86400 },
  async issueRefreshToken(ctx, client) {
    return client.grantTypeAllowed('refresh_token');
  },
  rotateRefreshToken() {
    return controls.rotate;
  },
};

const provider = new Provider(issuer, config);

provider.use(async (ctx, next) => {
  if (ctx.path.startsWith('/__test/')) {
    if (ctx.path === '/__test/stats') {
      ctx.body = stats;
    } else if (ctx.path === '/__test/reset') {
      resetStats();
      Object.assign(controls, defaults);
      ctx.body = { ok: true };
    } else if (ctx.path === '/__test/config') {
      const q = ctx.query;
      if (q.tokenOutage !== undefined) controls.tokenOutage = Number(q.tokenOutage);
      if (q.rotate !== undefined) controls.rotate = q.rotate === 'true';
      if (q.tokenDelayMs !== undefined) controls.tokenDelayMs = Number(q.tokenDelayMs);
      ctx.body = controls;
    } else {
      ctx.status = 404;
    }
    return;
  }
  if (ctx.path === '/token' && ctx.method === 'POST') {
    if (controls.tokenDelayMs) await new Promise((resolve) => setTimeout(resolve, controls.tokenDelayMs));
    if (controls.tokenOutage) {
      stats.tokenRequests.outage = (stats.tokenRequests.outage || 0) + 1;
      ctx.status = controls.tokenOutage;
      ctx.type = 'text/plain';
      ctx.body = 'Service temporarily unavailable';
      return;
    }
  }
  await next();
  if (ctx.path === '/token' && ctx.method === 'POST') {
    const grantType = (ctx.oidc && ctx.oidc.params && ctx.oidc.params.grant_type) || 'unknown';
    stats.tokenRequests[grantType] = (stats.tokenRequests[grantType] || 0) + 1;
  } else if (ctx.path === '/reg' && ctx.method === 'POST') {
    stats.registrations += 1;
  } else if (ctx.path === '/token/introspection') {
    stats.introspections += 1;
  } else if (ctx.path === '/token/revocation' && ctx.method === 'POST' && ctx.status === 200) {
    stats.revocations += 1;
  }
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider listening on ${issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => process.exit(0));
}
