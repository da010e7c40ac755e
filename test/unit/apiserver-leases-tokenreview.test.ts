// The lab API server's coordination.k8s.io/v1 Leases (create/get/update with resourceVersion
// conflicts, watch) and authentication.k8s.io/v1 TokenReviews of its ServiceAccount tokens (bound
// ones naming their Pod and Node), driven through the agent's KubeAccess with the controller's
// KubeLeaseLock and TokenReviewAuthenticator, and through raw HTTP where the wire matters.
import t from 'tap';
import { TokenReviewAuthenticator } from '../../daemon/controller/auth.js';
import { KubeLeaseLock, LeaseConflictError } from '../../daemon/controller/leader.js';
import { KubeAccess } from '../../daemon/kube/access.js';
import { serviceAccountToken, verifyServiceAccountToken } from '../../lab/apiserver/satoken.js';
import { ADMIN_USER, API_AUDIENCE } from '../../lab/apiserver/server.js';
import { rawWatch, startLab, token } from './apiserver-helpers.js';

const KEY = 'sa-signing-key';

const accessFor = (url: string, withToken = token) =>
  KubeAccess.fromKubeconfigObject(
    {
      clusters: [{ name: 'c', cluster: { server: url } }],
      users: [{ name: 'u', user: { token: withToken } }],
      contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'x',
    },
    '/',
  );

const record = (holder: string, renew: string) => ({
  holderIdentity: holder,
  leaseDurationSeconds: 15,
  acquireTime: '2026-01-01T00:00:00.000000Z',
  renewTime: renew,
  leaseTransitions: 0,
});

t.test('bound ServiceAccount tokens: Pod and Node under the HMAC; unbound tokens unchanged', async (t) => {
  const bound = serviceAccountToken(KEY, 'kube-system', 'sluice-agent', { podName: 'agent-x', podUid: 'u-1', nodeName: 'node-1' });
  t.same(verifyServiceAccountToken(KEY, bound), { namespace: 'kube-system', name: 'sluice-agent', podName: 'agent-x', podUid: 'u-1', nodeName: 'node-1' });
  t.equal(verifyServiceAccountToken('other', bound), undefined);
  // Another Node in the claims with the original MAC: refused.
  const [prefix, payload, mac] = bound.split('.');
  const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString());
  const moved = Buffer.from(JSON.stringify({ ...claims, node: 'node-2' })).toString('base64url');
  t.equal(verifyServiceAccountToken(KEY, `${prefix}.${moved}.${mac}`), undefined, 'the node claim cannot be forged');
  // An unbound token's MAC does not make a bound token.
  const unbound = serviceAccountToken(KEY, 'kube-system', 'sluice-agent');
  t.match(unbound, /^lab-sa\./, 'the old format');
  t.same(verifyServiceAccountToken(KEY, unbound), { namespace: 'kube-system', name: 'sluice-agent' });
  t.equal(verifyServiceAccountToken(KEY, `${prefix}.${payload}.${unbound.split('.')[2]}`), undefined);
  t.throws(() => serviceAccountToken(KEY, 'a', 'b', { podName: 'p', nodeName: '' }), /needs both a Pod name and a Node name/);
});

t.test('Leases: create, get, conditional update with 409 on a stale resourceVersion, watch', async (t) => {
  const { server } = await startLab(t);
  const api = accessFor(server.url);
  const discovery = (await api.getJson('/apis/coordination.k8s.io/v1')) as { resources: Array<{ name: string; namespaced: boolean; kind: string }> };
  t.match(discovery.resources, [{ name: 'leases', namespaced: true, kind: 'Lease' }]);

  const a = new KubeLeaseLock(api, 'kube-system', 'sluice-controller');
  const b = new KubeLeaseLock(api, 'kube-system', 'sluice-controller');
  t.equal(await a.get(), undefined, 'absent: undefined, not an error');
  const rv1 = await a.create(record('a', '2026-01-01T00:00:00.000000Z'));
  await t.rejects(b.create(record('b', '2026-01-01T00:00:00.000000Z')), LeaseConflictError, 'the second create loses (409 AlreadyExists)');
  const seen = await b.get();
  t.same(seen, { record: record('a', '2026-01-01T00:00:00.000000Z'), resourceVersion: rv1 });

  const rv2 = await a.update(record('a', '2026-01-01T00:00:02.000000Z'), rv1);
  t.ok(Number(rv2) > Number(rv1));
  await t.rejects(b.update(record('b', '2026-01-01T00:00:03.000000Z'), rv1), LeaseConflictError, 'an update naming a stale resourceVersion: 409 Conflict');
  t.equal((await b.get())!.record.holderIdentity, 'a');
  // Released: no holder in the spec at all, read back as ''.
  const rv3 = await a.update({ ...record('', '2026-01-01T00:00:04.000000Z'), leaseDurationSeconds: 1 }, rv2);
  const released = (await api.getJson('/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/sluice-controller')) as { spec: Record<string, unknown> };
  t.equal(released.spec.holderIdentity, undefined);
  t.match(await b.get(), { record: { holderIdentity: '', leaseDurationSeconds: 1 }, resourceVersion: rv3 });

  // Kubernetes refuses an unconditional update of a Lease.
  const blind = await fetch(`${server.url}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/sluice-controller`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ metadata: { name: 'sluice-controller' }, spec: { holderIdentity: 'x' } }),
  });
  t.equal(blind.status, 422);
  t.match(await blind.json(), { reason: 'Invalid', message: /metadata.resourceVersion: Invalid value: 0x0: must be specified for an update/ });
  // A merge patch carries the current version: allowed, and labels it sets survive the lock's updates.
  await api.patchJson('/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/sluice-controller', { metadata: { labels: { app: 'sluice' } } }, 'application/merge-patch+json');
  const c = new KubeLeaseLock(api, 'kube-system', 'sluice-controller');
  const cur = (await c.get())!;
  await c.update(record('c', '2026-01-01T00:00:06.000000Z'), cur.resourceVersion);
  const after = (await api.getJson('/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/sluice-controller')) as { metadata: { labels?: Record<string, string> }; spec: Record<string, unknown> };
  t.same(after.metadata.labels, { app: 'sluice' });
  t.equal(after.spec.holderIdentity, 'c');

  const watched = await rawWatch(server.url, `/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?watch=1&resourceVersion=${rv1}`, 4);
  t.same(
    watched.lines.map((l) => `${l.type} ${l.object.spec.holderIdentity ?? ''}`),
    ['MODIFIED a', 'MODIFIED ', 'MODIFIED ', 'MODIFIED c'],
    'every write is watchable from a resourceVersion',
  );
  t.throws(() => new KubeLeaseLock(api, 'Kube System', 'x'), /namespace "Kube System" is not a valid Kubernetes name/);
});

t.test('TokenReview: users, groups, Pod and Node of bound tokens; refusals', async (t) => {
  const { server, core } = await startLab(t, { serviceAccountKey: KEY });
  await core.createNamespace({ body: { metadata: { name: 'sys' } } });
  await core.createNamespacedServiceAccount({ namespace: 'sys', body: { metadata: { name: 'agent' } } });
  const pod = await core.createNamespacedPod({ namespace: 'sys', body: { metadata: { name: 'agent-1' }, spec: { nodeName: 'node-1', serviceAccountName: 'agent', containers: [{ name: 'c', image: 'i' }] } } });
  const bound = serviceAccountToken(KEY, 'sys', 'agent', { podName: 'agent-1', podUid: pod.metadata!.uid!, nodeName: 'node-1' });
  const unbound = serviceAccountToken(KEY, 'sys', 'agent');

  const review = async (body: unknown, withToken = token) => {
    const res = await fetch(`${server.url}/apis/authentication.k8s.io/v1/tokenreviews`, {
      method: 'POST',
      headers: { authorization: `Bearer ${withToken}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  };
  const tr = (tok: string, audiences?: string[]) => ({ apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token: tok, ...(audiences ? { audiences } : {}) } });

  const ok = await review(tr(bound));
  t.equal(ok.status, 201);
  t.match(ok.body, { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', status: { authenticated: true, audiences: [API_AUDIENCE] } });
  t.same(ok.body.status.user.groups, ['system:serviceaccounts', 'system:serviceaccounts:sys', 'system:authenticated']);
  t.equal(ok.body.status.user.username, 'system:serviceaccount:sys:agent');
  t.match(ok.body.status.user.uid, /^[0-9a-f-]{36}$/, 'the ServiceAccount uid');
  t.same(ok.body.status.user.extra, {
    'authentication.kubernetes.io/pod-name': ['agent-1'],
    'authentication.kubernetes.io/pod-uid': [pod.metadata!.uid],
    'authentication.kubernetes.io/node-name': ['node-1'],
  });
  const plain = await review(tr(unbound));
  t.match(plain.body.status, { authenticated: true, user: { username: 'system:serviceaccount:sys:agent' } });
  t.equal(plain.body.status.user.extra, undefined, 'an unbound token names no Pod or Node');
  t.match((await review(tr(token))).body.status, { authenticated: true, user: { username: ADMIN_USER } });
  t.match((await review(tr('nonsense'))).body, { status: { authenticated: false, error: 'invalid bearer token' } });
  t.match((await review(tr(bound, ['sluice-controller']))).body.status, { authenticated: false, error: /invalid for the target audiences/ });
  t.match((await review(tr(bound, [API_AUDIENCE]))).body.status, { authenticated: true });
  t.match(await review({ spec: {} }), { status: 400, body: { reason: 'BadRequest', message: 'token is required for TokenReview in authentication' } });
  t.match(await review({ kind: 'SubjectAccessReview', spec: { token: 'x' } }), { status: 400 });
  t.equal((await review(tr(bound), 'wrong-token')).status, 401, 'the reviewer must authenticate itself');
  t.equal((await review(tr(bound), bound)).status, 201, 'a ServiceAccount token may review (RBAC is not enforced)');
  const get = await fetch(`${server.url}/apis/authentication.k8s.io/v1/tokenreviews`, { headers: { authorization: `Bearer ${token}` } });
  t.equal(get.status, 405);
  const disco = (await (await fetch(`${server.url}/apis/authentication.k8s.io/v1`, { headers: { authorization: `Bearer ${token}` } })).json()) as Record<string, any>;
  t.same(disco.resources, [{ name: 'tokenreviews', singularName: '', namespaced: false, kind: 'TokenReview', verbs: ['create'] }]);

  // The controller's authenticator over KubeAccess against this server.
  const auth = new TokenReviewAuthenticator({ api: accessFor(server.url) });
  t.same(await auth.authenticateRequest({ headers: { authorization: `Bearer ${bound}` } }), { user: 'system:serviceaccount:sys:agent', nodeName: 'node-1' });
  t.same(await auth.authenticateRequest({ headers: { authorization: `Bearer ${unbound}` } }), { user: 'system:serviceaccount:sys:agent' });
  t.equal(await auth.authenticateRequest({ headers: { authorization: 'Bearer nonsense' } }), undefined);
  const noAccess = new TokenReviewAuthenticator({ api: accessFor(server.url, 'wrong-token') });
  await t.rejects(noAccess.authenticateRequest({ headers: { authorization: `Bearer ${bound}` } }), /cannot review the caller's token with the API server: .*HTTP 401/);

  // The lab deletes Pods at once (no graceful deletion): a bound token outlives its Pod object,
  // so a stopping agent can still call the API; it ends with its ServiceAccount.
  await core.deleteNamespacedPod({ namespace: 'sys', name: 'agent-1' });
  t.match((await review(tr(bound))).body.status, { authenticated: true, user: { extra: { 'authentication.kubernetes.io/node-name': ['node-1'] } } });
  await core.deleteNamespacedServiceAccount({ namespace: 'sys', name: 'agent' });
  t.match((await review(tr(bound))).body.status, { authenticated: false });
  const list = await fetch(`${server.url}/api/v1/namespaces`, { headers: { authorization: `Bearer ${bound}` } });
  t.equal(list.status, 401, 'and no longer authenticates requests either');
});
