/**
 * daemon/controller/auth.ts: the bearer token of a request reviewed with a TokenReview (against a
 * fake API here; against the lab API server in apiserver-leases-tokenreview.test.ts), the Node a
 * bound token names, the cache of positive answers (keyed by a hash, TTL on an injected clock),
 * API failures as errors rather than verdicts (who may read which Node's view is the API
 * server's: test/unit/controlplane-api.test.ts).
 */
import t from 'tap';
import { AuthUnavailableError, bearerToken, parseTokenReview, TokenReviewAuthenticator } from '../../daemon/controller/auth.js';
import { KubeApiError } from '../../daemon/kube/access.js';

const NODE = 'authentication.kubernetes.io/node-name';

/** A TokenReview answer of the given status. */
const answer = (status: unknown) => ({ apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', status });
const boundUser = (node: string) => ({
  authenticated: true,
  user: {
    username: 'system:serviceaccount:kube-system:sluice-agent',
    groups: ['system:serviceaccounts', 'system:authenticated'],
    extra: { [NODE]: [node], 'authentication.kubernetes.io/pod-name': ['sluice-agent-x7k2p'] },
  },
});

/** A fake API: answers per token, and every request body it received. */
function fakeApi(answers: Record<string, () => unknown>) {
  const requests: Array<{ path: string; body: any; timeoutMs: number | undefined }> = [];
  return {
    requests,
    postJson: async (path: string, body: unknown, timeoutMs?: number) => {
      requests.push({ path, body, timeoutMs });
      const token = (body as { spec: { token: string } }).spec.token;
      const a = answers[token];
      if (!a) return answer({ authenticated: false, error: 'invalid bearer token' });
      return a();
    },
  };
}

const req = (authorization?: string) => ({ headers: authorization === undefined ? {} : { authorization } });

t.test('bearer tokens are taken from the Authorization header only', async (t) => {
  t.equal(bearerToken({ authorization: 'Bearer abc.def' }), 'abc.def');
  t.equal(bearerToken({ authorization: 'bearer   abc' }), 'abc', 'scheme case-insensitive');
  t.equal(bearerToken({}), undefined);
  t.equal(bearerToken({ authorization: 'Basic dXNlcjpwYXNz' }), undefined);
  t.equal(bearerToken({ authorization: 'Bearer' }), undefined);
  t.equal(bearerToken({ authorization: 'Bearer a b' }), undefined, 'not two words');
});

t.test('a bound token: the user and its Node; the review is what the API expects', async (t) => {
  const api = fakeApi({ 'tok-a': () => answer(boundUser('node-1')) });
  const auth = new TokenReviewAuthenticator({ api, clock: { now: () => 0 } });
  t.same(await auth.authenticateRequest(req('Bearer tok-a')), { user: 'system:serviceaccount:kube-system:sluice-agent', nodeName: 'node-1' });
  t.same(api.requests, [
    { path: '/apis/authentication.k8s.io/v1/tokenreviews', body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token: 'tok-a' } }, timeoutMs: 5_000 },
  ]);
  const withAudience = new TokenReviewAuthenticator({ api, audiences: ['sluice-controller'], timeoutMs: 1_000 });
  await withAudience.authenticateToken('tok-a');
  t.same(api.requests.at(-1)!.body.spec, { token: 'tok-a', audiences: ['sluice-controller'] });
  t.equal(api.requests.at(-1)!.timeoutMs, 1_000);
});

t.test('unauthenticated callers are undefined, without a review when there is no token', async (t) => {
  const api = fakeApi({});
  const auth = new TokenReviewAuthenticator({ api });
  t.equal(await auth.authenticateRequest(req()), undefined);
  t.equal(await auth.authenticateRequest(req('Basic dXNlcjpwYXNz')), undefined);
  t.equal(api.requests.length, 0, 'no token, no review');
  t.equal(await auth.authenticateRequest(req('Bearer forged')), undefined);
  t.equal(await auth.authenticateRequest(req('Bearer forged')), undefined);
  t.equal(api.requests.length, 2, 'negative answers are not cached');
});

t.test('TokenReview answers: what each means', async (t) => {
  t.same(parseTokenReview(answer({ authenticated: true, user: { username: 'alice' } })), { user: 'alice' }, 'no extra: no Node');
  t.same(parseTokenReview(answer({ authenticated: true, user: { username: 'alice', extra: { other: ['x'] } } })), { user: 'alice' });
  t.same(parseTokenReview(answer(boundUser('n2'))), { user: 'system:serviceaccount:kube-system:sluice-agent', nodeName: 'n2' });
  t.equal(parseTokenReview(answer({ authenticated: false, error: 'token expired' })), undefined);
  t.equal(parseTokenReview(answer({})), undefined, 'authenticated omitted means false (omitempty)');
  const bad: Array<[unknown, RegExp]> = [
    [{ kind: 'Status' }, /has no status/],
    [null, /has no status/],
    [answer({ authenticated: 'yes' }), /status.authenticated "yes", not a boolean/],
    [answer({ authenticated: true }), /names no user/],
    [answer({ authenticated: true, user: { username: '' } }), /names no user/],
    [answer({ authenticated: true, user: { username: 'a', extra: ['x'] } }), /extra that is not a map/],
    [answer({ authenticated: true, user: { username: 'a', extra: { [NODE]: 'n1' } } }), /node-name"\] = "n1", not one Node name/],
    [answer({ authenticated: true, user: { username: 'a', extra: { [NODE]: ['n1', 'n2'] } } }), /not one Node name/],
    [answer({ authenticated: true, user: { username: 'a', extra: { [NODE]: [''] } } }), /not one Node name/],
  ];
  for (const [a, why] of bad) t.throws(() => parseTokenReview(a), why);
  t.throws(() => parseTokenReview(null), AuthUnavailableError);
});

t.test('positive answers are cached for the TTL under a hash of the token', async (t) => {
  let now = 0;
  const api = fakeApi({ 'tok-a': () => answer(boundUser('node-1')), 'tok-b': () => answer(boundUser('node-2')) });
  const auth = new TokenReviewAuthenticator({ api, clock: { now: () => now }, cacheTtlMs: 10_000, cacheMaxEntries: 2 });
  await auth.authenticateToken('tok-a');
  now = 9_999;
  t.same(await auth.authenticateToken('tok-a'), { user: 'system:serviceaccount:kube-system:sluice-agent', nodeName: 'node-1' });
  t.equal(api.requests.length, 1, 'served from the cache within the TTL');
  now = 10_000;
  await auth.authenticateToken('tok-a');
  t.equal(api.requests.length, 2, 'reviewed again once the TTL passed');
  t.same((await auth.authenticateToken('tok-b'))?.nodeName, 'node-2', 'another token is another entry');
  t.equal(api.requests.length, 3);
  const cache = (auth as unknown as { cache: Map<string, unknown> }).cache;
  t.ok([...cache.keys()].every((k) => /^[0-9a-f]{64}$/.test(k)), 'keys are SHA-256 hashes, not tokens');

  // Concurrent requests with one token share one review.
  now = 50_000;
  const [x, y] = await Promise.all([auth.authenticateToken('tok-b'), auth.authenticateToken('tok-b')]);
  t.same(x, y);
  t.equal(api.requests.length, 4);

  // The cache is bounded: a third token pushes out the oldest entry.
  api.requests.length = 0;
  const api2 = fakeApi({ a: () => answer(boundUser('n-a')), b: () => answer(boundUser('n-b')), c: () => answer(boundUser('n-c')) });
  const small = new TokenReviewAuthenticator({ api: api2, clock: { now: () => 0 }, cacheMaxEntries: 2 });
  for (const tok of ['a', 'b', 'c', 'b', 'c', 'a']) await small.authenticateToken(tok);
  t.same(api2.requests.map((r) => r.body.spec.token), ['a', 'b', 'c', 'a'], 'a was evicted by c; b and c were served from the cache');
  t.throws(() => new TokenReviewAuthenticator({ api: api2, cacheMaxEntries: 0 }), /at least 1/);
});

t.test('API failures are errors naming the cause, never a verdict, and are not cached', async (t) => {
  let mode: 'down' | 'forbidden' | 'garbage' | 'up' = 'down';
  const api = {
    postJson: async () => {
      if (mode === 'down') throw Object.assign(new Error('connect ECONNREFUSED 10.96.0.1:443'), { code: 'ECONNREFUSED' });
      if (mode === 'forbidden') {
        throw new KubeApiError('POST /apis/authentication.k8s.io/v1/tokenreviews: HTTP 403 Forbidden: tokenreviews.authentication.k8s.io is forbidden', 403, 'Forbidden');
      }
      if (mode === 'garbage') return { kind: 'Status', status: 'Failure' };
      return answer(boundUser('node-1'));
    },
  };
  const auth = new TokenReviewAuthenticator({ api });
  await t.rejects(auth.authenticateRequest(req('Bearer tok')), { name: 'AuthUnavailableError', message: /cannot review the caller's token with the API server: connect ECONNREFUSED/ });
  mode = 'forbidden';
  await t.rejects(auth.authenticateRequest(req('Bearer tok')), /HTTP 403 Forbidden: tokenreviews.authentication.k8s.io is forbidden/);
  mode = 'garbage';
  await t.rejects(auth.authenticateRequest(req('Bearer tok')), /TokenReview answer has no status/);
  mode = 'up';
  t.same(await auth.authenticateRequest(req('Bearer tok')), { user: 'system:serviceaccount:kube-system:sluice-agent', nodeName: 'node-1' });
});

