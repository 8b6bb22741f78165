// A real OpenID Connect provider for the sign-in tests: panva's certified oidc-provider, configured here and
// nowhere else, so the web app's sign-in is tested against an implementation it did not write.
//
//   node tests/oidc/provider.mjs    -> prints {"issuer": "http://127.0.0.1:<port>"} once it listens
//
// Its built-in development pages sign anybody in: the login name is the account, "alice" becomes
// alice@example.com (verified) in the groups PEOPLE lists. A test registers its own confidential client
// (its redirect URI is the app under test's) through the provider's Dynamic Client Registration endpoint.

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

// Groups by login name; any other login is a person in no group.
const PEOPLE = {
  alice: ['analysts', 'ewr'],
  bob: ['analysts', 'jfk'],
  carol: ['admins'],
};

// The provider's own session and the artifacts of a sign-in: long enough for a slow machine to finish a
// sign-in, short enough that nothing outlives a test run. (The web app's session is the app's setting.)
const TTL_S = { Session: 600, Interaction: 300, Grant: 600, AuthorizationCode: 60, AccessToken: 300, IdToken: 300 };

function account(login) {
  return {
    accountId: login,
    async claims() {
      return {
        sub: login,
        name: login.charAt(0).toUpperCase() + login.slice(1),
        email: `${login}@example.com`,
        email_verified: true,
        groups: PEOPLE[login] ?? [],
      };
    },
  };
}

function configuration() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    jwks: { keys: [{ ...privateKey.export({ format: 'jwk' }), kid: 'tests', use: 'sig', alg: 'RS256' }] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    findAccount: async (ctx, id) => account(id),
    scopes: ['openid', 'profile', 'email', 'groups', 'offline_access'],
    claims: { openid: ['sub'], profile: ['name'], email: ['email', 'email_verified'], groups: ['groups'] },
    // conformIdTokenClaims stays on (the default, as OIDC Core says): with the code flow the ID token names
    // only the subject, and email and groups come from the UserInfo endpoint, which the app must then ask.
    pkce: { methods: ['S256'], required: () => true },
    features: {
      devInteractions: { enabled: true },
      registration: { enabled: true },
      rpInitiatedLogout: { enabled: true },
    },
    ttl: TTL_S,
  };
}

const server = createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, configuration());
  server.on('request', provider.callback());
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});

// Stops when the test process closes its end of stdin (even a killed one), or on a signal.
const stop = () => process.exit(0);
process.stdin.on('end', stop).on('error', stop).resume();
process.on('SIGTERM', stop).on('SIGINT', stop);
