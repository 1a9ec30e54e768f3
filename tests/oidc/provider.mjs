// A real external OAuth 2.0 authorization server for tests: oidc-provider 9.x,
// issuing JWT access tokens (RFC 9068) through the client_credentials grant
// for exactly one resource (RFC 8707 resource indicator).
//
// Run with Node 22:  node provider.mjs [config.json]
// The configuration is the JSON file named by the first argument, or else the
// JSON text of the OIDC_PROVIDER_CONFIG environment variable:
//   {
//     "node_modules": "<folder holding oidc-provider>",
//     "port": 12345, "issuer": "http://127.0.0.1:12345",
//     "resource": "http://127.0.0.1:9999/mcp",
//     "scopes": "kalends:read kalends:write",
//     "access_token_ttl": 300,
//     "clients": [{"client_id": "...", "client_secret": "...", "scope": "kalends:read"}],
//     "jwks": {"keys": [<private EC P-256 JWKs with kid, alg ES256, use sig>]},
//     "signing_kid": "<kid of the key that signs access tokens>"
//   }
// Prints "READY <issuer>" on stdout once it listens, and nothing else there.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { randomBytes } from 'node:crypto';

const source = process.argv[2]
  ? readFileSync(process.argv[2], 'utf8')
  : process.env.OIDC_PROVIDER_CONFIG;
if (!source) {
  console.error('usage: provider.mjs <config.json> (or set OIDC_PROVIDER_CONFIG)');
  process.exit(2);
}
const config = JSON.parse(source);

// oidc-provider lives in the test cache, not next to this file, and bare
// specifiers in ES modules ignore NODE_PATH: resolve it from that folder.
const require = createRequire(join(config.node_modules, 'noop.js'));
const { default: Provider, errors } = await import(
  pathToFileURL(require.resolve('oidc-provider')).href
);

const scopes = config.scopes.split(' ');
const accessTokenTTL = config.access_token_ttl ?? 300;
const signing = { alg: 'ES256' };
if (config.signing_kid) signing.kid = config.signing_kid;

const provider = new Provider(config.issuer, {
  clients: config.clients.map((client) => ({
    client_id: client.client_id,
    client_secret: client.client_secret,
    scope: client.scope,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: client.token_endpoint_auth_method ?? 'client_secret_basic',
    // The default (RS256) has no key here: only EC P-256 keys are configured.
    id_token_signed_response_alg: 'ES256',
  })),
  // A client's "scope" metadata may only name scopes listed here, and it only
  // restricts listed scopes: an unlisted one would pass the client's allowance.
  scopes,
  jwks: config.jwks,
  // The default reads the same value, with a notice that it should be defined.
  ttl: { ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL ?? accessTokenTTL },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => config.resource,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resourceIndicator) => {
        if (resourceIndicator !== config.resource) {
          throw new errors.InvalidTarget();
        }
        return {
          scope: config.scopes,
          audience: config.resource,
          accessTokenTTL,
          accessTokenFormat: 'jwt',
          jwt: { sign: signing },
        };
      },
    },
  },
});

provider.on('server_error', (ctx, error) => {
  console.error('server_error', error);
});

const server = provider.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`READY ${config.issuer}\n`);
});
server.on('error', (error) => {
  console.error(error);
  process.exit(1);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => process.exit(0));
}
