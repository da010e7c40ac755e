// What agents report their bridges enforce, end to end: the controller's RealizedViews (a
// question waits for the Nodes it names, a report answers every question it covers), its
// POST /realized-views over real HTTP (only an agent, for its own Node, of this store; a line that
// is not a report is refused and named; a request that breaks is told apart from one the agent
// ended), and the agent's RealizedReporter (the newest report
// written once per request, again after the controller ends the request or it is rotated).
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import t from 'tap';
import { type ControlPlaneIdentity, startControlPlaneApiServer } from '../../daemon/controller/apiserver.js';
import { RealizedViews } from '../../daemon/controller/realized-views.js';
import { ControlPlaneStore } from '../../daemon/controller/store.js';
import { RealizedReporter } from '../../daemon/controlplane/realized-reporter.js';
import { type ViewVersions, viewCovers } from '../../daemon/controlplane/types.js';
import { ManualClock } from './manual-clock.js';

/** The request a report came on (the API server's stream object). */
const REQUEST = {};
const v = (np: number, atg: number, ag: number): ViewVersions => ({ NetworkPolicy: BigInt(np), AppliedToGroup: BigInt(atg), AddressGroup: BigInt(ag) });

t.test('RealizedViews: a question waits for the Nodes it names; one report answers every question it covers', async (t) => {
  const clock = new ManualClock();
  const views = new RealizedViews(clock);
  t.ok(viewCovers(v(3, 2, 5), v(3, 1, 5)) && !viewCovers(v(3, 2, 5), v(4, 0, 0)), 'covers: at least every kind');

  views.report('n2', v(1, 1, 1), REQUEST);
  views.report('n3', v(0, 0, 0), REQUEST);
  let a = false;
  let b = false;
  void views.whenConfirmed(new Map([['n2', v(2, 1, 4)], ['n3', v(0, 0, 2)]]), 1000).then(() => (a = true));
  void views.whenConfirmed(new Map([['n2', v(2, 0, 3)]]), 1000).then(() => (b = true));
  t.equal(views.waitingQuestions, 2);
  views.report('n2', v(2, 1, 3), REQUEST);
  await clock.advance(0);
  t.ok(b && !a, 'the report covers the second question, not the first (AddressGroup 3 < 4)');
  views.report('n2', v(2, 1, 4), REQUEST);
  await clock.advance(0);
  t.notOk(a, 'the first still waits for n3');
  views.report('n3', v(0, 0, 9), REQUEST);
  await clock.advance(0);
  t.ok(a, 'answered once both Nodes reported enough');
  t.equal(views.waitingQuestions, 0);

  // A Node that reports but not enough: answered when the wait is over. A Node with no report at
  // all is not waited for. A question already covered: at once.
  views.report('n4', v(0, 0, 0), REQUEST);
  let late = false;
  void views.whenConfirmed(new Map([['n4', v(1, 1, 1)]]), 500).then(() => (late = true));
  await clock.advance(499);
  t.notOk(late);
  await clock.advance(1);
  t.ok(late, 'answered at the end of the wait');
  t.notOk(views.confirmed('n4', v(1, 1, 1)));
  let silent = false;
  void views.whenConfirmed(new Map([['n9', v(1, 1, 1)]]), 500).then(() => (silent = true));
  await clock.advance(0);
  t.ok(silent, 'a Node that never reported is not waited for');
  t.ok(views.confirmed('n3', v(0, 0, 9)));
  await views.whenConfirmed(new Map([['n3', v(0, 0, 1)]]), 0);

  // A report replaces the last (an agent that restarted reports what its bridge holds now).
  views.report('n3', v(0, 0, 2), REQUEST);
  t.notOk(views.confirmed('n3', v(0, 0, 9)), 'a lower report replaces a higher one');

  // A broken request takes its report with it, not a later one that came on another request.
  const next = {};
  views.report('n3', v(0, 0, 5), next);
  views.broken('n3', REQUEST);
  t.ok(views.confirmed('n3', v(0, 0, 5)), 'the old request broke after the new one reported: the new report stays');
  views.broken('n3', next);
  t.notOk(views.confirmed('n3', v(0, 0, 0)), 'the request that carried it broke: the report goes');

  // Leadership lost: every report goes, waiting questions are answered (with nothing confirmed).
  views.report('n5', v(0, 0, 0), REQUEST);
  let cleared = false;
  void views.whenConfirmed(new Map([['n5', v(1, 1, 1)]]), 10_000).then(() => (cleared = true));
  views.clear();
  await clock.advance(0);
  t.ok(cleared, 'a waiting question is answered at once');
  t.notOk(views.confirmed('n2', v(0, 0, 0)), 'no report is kept');
  t.match(views.status(), { nodes: 0, waitingQuestions: 0 });
  t.equal(clock.waiting, 0, 'no timer left behind');
});

const IDENTITIES: Record<string, ControlPlaneIdentity> = {
  'tok-n1': { user: 'system:serviceaccount:kube-system:sluice-agent', nodeName: 'n1' },
  'tok-admin': { user: 'admin' },
};

/** A raw POST of `body` to /realized-views: its status and body (parsed: one JSON object). */
function post(url: string, token: string, body: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}/realized-views`, { method: 'POST', headers: { Authorization: `Bearer ${token}` } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function until(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

t.test('POST /realized-views and the RealizedReporter, over HTTP', async (t) => {
  const store = new ControlPlaneStore();
  const reports: { node: string; versions: ViewVersions }[] = [];
  let broken = 0;
  const warnings: string[] = [];
  let serving = true;
  const server = await startControlPlaneApiServer({
    store,
    authenticate: async (req) => IDENTITIES[/^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? ''],
    readAll: () => true,
    serving: () => (serving ? { ready: true } : { ready: false, reason: 'a standby replica' }),
    realizedViews: { report: (node, versions) => void reports.push({ node, versions }), broken: () => void broken++ },
    log: { warn: (o: { err?: string }) => warnings.push(o.err ?? '') } as never,
  });
  t.teardown(() => server.close());
  const line = (storeId: string, x: ViewVersions) => `${JSON.stringify({ store: storeId, versions: { NetworkPolicy: String(x.NetworkPolicy), AppliedToGroup: String(x.AppliedToGroup), AddressGroup: String(x.AddressGroup) } })}\n`;

  t.match(await post(server.url, 'tok-admin', line(store.id, v(1, 1, 1))), { status: 403, body: { message: /user "admin" is no Node's agent/ } }, 'only an agent reports');
  t.match(await post(server.url, 'nobody', ''), { status: 401 });
  t.match(await post(server.url, 'tok-n1', line(store.id, v(1, 2, 3)) + line('another-store', v(9, 9, 9))), { status: 200, body: { applied: 1, otherStore: 1 } }, 'a report of another store is counted, not applied');
  t.same(reports, [{ node: 'n1', versions: v(1, 2, 3) }], 'the report applied, for the caller\'s own Node');
  t.match(await post(server.url, 'tok-n1', '{"store": "x", "versions": {"NetworkPolicy": "1"}}\n'), { status: 200, body: { kind: 'Status', code: 400, message: /"versions" is not/ } }, 'a line that is not a report ends the request with a Status naming why');
  t.match(warnings, [/"versions" is not/], 'and is logged');
  t.equal(broken, 0, 'requests the agent ended are not broken');
  // A request that breaks before the agent ends it.
  await new Promise<void>((resolve) => {
    const req = http.request(`${server.url}/realized-views`, { method: 'POST', headers: { Authorization: 'Bearer tok-n1' } }, () => {
      req.write(line(store.id, v(4, 4, 4)));
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 50);
    });
    req.on('error', () => undefined);
    req.flushHeaders();
  });
  await until('the break seen', () => broken === 1);
  t.same(reports.at(-1), { node: 'n1', versions: v(4, 4, 4) }, 'its report was applied, then the request reported broken');
  serving = false;
  t.match(await post(server.url, 'tok-n1', line(store.id, v(1, 2, 3))), { status: 503, body: { message: /a standby replica/ } }, 'a standby takes no reports');
  serving = true;
  reports.length = 0;

  // The reporter: the newest report once per request, again on each new request.
  const reporter = new RealizedReporter({ server: server.url, token: 'tok-n1', rotateMs: 200, initialBackoffMs: 20, maxBackoffMs: 50 });
  t.teardown(() => reporter.stop());
  reporter.set(store.id, v(1, 1, 1));
  reporter.set(store.id, v(2, 1, 1));
  reporter.start();
  await until('the newest report', () => reports.length > 0);
  t.same(reports[0], { node: 'n1', versions: v(2, 1, 1) }, 'made before the request opened: only the newest is written');
  reporter.set(store.id, v(2, 1, 1));
  reporter.set(store.id, v(3, 1, 1));
  await until('the next report', () => reports.some((r) => r.versions.NetworkPolicy === 3n));
  const opened = reporter.status().opened;
  await until('a rotation', () => reporter.status().opened > opened);
  await until('the newest report again on the new request', () => reports.filter((r) => r.versions.NetworkPolicy === 3n).length >= 2);
  t.equal(reports.filter((r) => r.versions.NetworkPolicy === 2n).length, 1, 'a report repeated unchanged is not written again on the same request');

  // The controller ends the request (it stopped leading): the reporter opens another at once.
  const before = reporter.status().opened;
  const seen = reports.length;
  server.api.endWatches();
  await until('reopened', () => reporter.status().opened > before && reports.length > seen);
  t.match(reporter.status(), { connected: true }, 'connected again');
  t.notOk('lastError' in reporter.status(), 'a clean end is no failure');

  // A controller that refuses: the failure is kept in the status until a request opens again.
  serving = false;
  server.api.endWatches();
  await until('a failure', () => reporter.status().lastError !== undefined);
  t.match(reporter.status(), { connected: false, lastError: /HTTP 503: realized views are not taken now: a standby replica/ }, 'the failure names the controller and why');
  serving = true;
  await until('reconnected', () => reporter.status().connected);
  await reporter.stop();
  t.match(reporter.status(), { connected: false }, 'stopped');
});

t.test('RealizedReporter: a connection lost inside the response is a failure, not a crash, and it reconnects', async (t) => {
  // A server that answers 200 and then drops the connection, each time.
  let accepted = 0;
  const server = net.createServer((socket) => {
    accepted++;
    socket.once('data', () => {
      socket.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
      setTimeout(() => socket.destroy(), 20);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const warned: string[] = [];
  const log = { info: () => undefined, warn: (o: { err?: string }) => void warned.push(o.err ?? '') };
  const reporter = new RealizedReporter({ server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, token: 'x', initialBackoffMs: 10, maxBackoffMs: 20, log });
  reporter.set('store', v(1, 1, 1));
  reporter.start();
  await until('three connections', () => accepted >= 3 && reporter.status().failures >= 2);
  await reporter.stop();
  t.match(warned[0], /the reports' connection/, 'a loss is a failure naming the connection');
  t.match(reporter.status(), { connected: false }, 'stopped');
});
