/**
 * The real compiled plugin (built here by scripts/build-cni.mjs) against a real startCniServer
 * with a recording handler, all asserted on the binary's stdout and exit code: the native front
 * end the runtime runs, or the standalone plugin when cni-binary-standalone.test.ts imports this
 * file (SLUICE_CNI_UNDER_TEST=standalone). No root needed: the socket lives in a private /tmp/cn-*
 * directory.
 */
import { createServer } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { CniError, startCniServer } from '../../daemon/cni/server.js';
import { PTP_040, PTP_100 } from './cni-fixtures.js';
import { RecordingHandler, buildCniBinary, capturingLogger, gate, makeStaleSocket, runCni, tempDir, until } from './cni-harness.js';

buildCniBinary();
const tmp = tempDir();
t.teardown(tmp.remove);
const socketPath = join(tmp.dir, 'run', 'cni.sock');
const handler = new RecordingHandler();
const { log, lines } = capturingLogger();
const server = await startCniServer(socketPath, handler, log);
t.teardown(() => server.close());

t.beforeEach(() => {
  handler.calls = [];
  handler.behave = async () => undefined;
});

const podEnv = (command: string, id = 'c0ffee01') => ({
  CNI_COMMAND: command,
  CNI_CONTAINERID: id,
  CNI_NETNS: '/var/run/netns/cn-pod',
  CNI_IFNAME: 'eth0',
  CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=c0ffee01',
  CNI_PATH: '/opt/cni/bin',
});

const conf = (extra: Record<string, unknown> = {}) => ({
  cniVersion: '0.4.0',
  name: 'k8s-pod-network',
  type: 'sluice-cni',
  socketPath,
  prevResult: PTP_040,
  ...extra,
});

t.test('the build script skips the build when the binary is newer than its sources', async (t) => {
  t.match(buildCniBinary(), /^sluice-cni: up to date/);
});

t.test('VERSION is answered locally', async (t) => {
  const a = await runCni({ CNI_COMMAND: 'VERSION' }, { cniVersion: '1.0.0' });
  t.equal(a.code, 0);
  t.same(a.json, { cniVersion: '1.0.0', supportedVersions: ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] });
  const b = await runCni({ CNI_COMMAND: 'VERSION' }, '');
  t.equal(b.code, 0);
  t.equal(b.json?.cniVersion, '1.1.0', 'no input: the latest version');
  t.equal(handler.calls.length, 0, 'the agent is not asked');
});

t.test('ADD returns prevResult in the config version, unchanged otherwise, and the handler gets a normalized PodRequest', async (t) => {
  const a = await runCni(podEnv('ADD'), conf());
  t.equal(a.code, 0, a.stderr);
  t.same(a.json, PTP_040, '0.4.0 in, 0.4.0 out, identical');
  t.equal(handler.count('add', 'end'), 1);
  const call = handler.calls[0];
  if (call?.op !== 'add') throw new Error('expected an add call');
  t.match(call.req, {
    containerId: 'c0ffee01',
    netns: '/var/run/netns/cn-pod',
    ifName: 'eth0',
    podNamespace: 'ns1',
    podName: 'web-0',
    cniVersion: '0.4.0',
    networkName: 'k8s-pod-network',
  });
  t.same(call.req.prevResult?.ips, [{ interface: 1, address: '10.99.7.2/24', gateway: '10.99.7.1' }], 'handler sees the 1.x shape');

  const b = await runCni(podEnv('ADD', 'c0ffee02'), conf({ cniVersion: '1.0.0', prevResult: PTP_100 }));
  t.equal(b.code, 0);
  t.same(b.json, PTP_100, '1.0.0 in, 1.0.0 out, identical');

  const c = await runCni(podEnv('ADD', 'c0ffee03'), conf({ cniVersion: '1.1.0', prevResult: PTP_040 }));
  t.equal(c.code, 0);
  t.equal(c.json?.cniVersion, '1.1.0');
  t.same(c.json?.ips, [{ interface: 1, address: '10.99.7.2/24', gateway: '10.99.7.1' }], '0.4.0-shaped prevResult converted to 1.1.0');

  const d = await runCni(podEnv('ADD', 'c0ffee04'), conf({ cniVersion: '0.3.1', prevResult: PTP_100 }));
  t.equal(d.code, 0);
  t.same((d.json?.ips as unknown[] | undefined)?.[0], { version: '4', interface: 1, address: '10.99.7.3/24', gateway: '10.99.7.1' }, '1.0.0-shaped prevResult converted to 0.3.1');
});

t.test('malformed JSON on stdin is a decode failure (6)', async (t) => {
  const r = await runCni(podEnv('ADD'), '{"cniVersion": "1.0.0", ');
  t.equal(r.code, 1);
  t.match(r.json, { cniVersion: '1.1.0', code: 6, msg: /failed to decode the network config on stdin/ });
  const arr = await runCni(podEnv('ADD'), '[1,2]');
  t.match(arr.json, { code: 6, msg: /must be a JSON object/ });
  t.equal(handler.calls.length, 0);
});

t.test('an unsupported or missing cniVersion is code 1', async (t) => {
  const r = await runCni(podEnv('ADD'), conf({ cniVersion: '0.2.0' }));
  t.equal(r.code, 1);
  t.match(r.json, { cniVersion: '1.1.0', code: 1, msg: /incompatible CNI version "0\.2\.0"/ });
  const m = await runCni(podEnv('ADD'), conf({ cniVersion: undefined }));
  t.match(m.json, { code: 1, msg: /no "cniVersion"/ });
  const chk = await runCni(podEnv('CHECK'), conf({ cniVersion: '0.3.1' }));
  t.match(chk.json, { cniVersion: '0.3.1', code: 1, msg: /does not allow CHECK/ });
  t.equal(handler.calls.length, 0);
});

t.test('ADD without prevResult says sluice must be chained after a primary CNI (7)', async (t) => {
  const r = await runCni(podEnv('ADD'), conf({ prevResult: undefined }));
  t.equal(r.code, 1);
  t.match(r.json, { cniVersion: '0.4.0', code: 7, msg: /must be chained after a primary CNI plugin/ });
  t.equal(handler.calls.length, 0);
});

t.test('an invalid prevResult is rejected by the agent naming the field (7)', async (t) => {
  const r = await runCni(podEnv('ADD'), conf({ prevResult: { ...PTP_040, ips: [{ version: '4', address: '10.99.7.2' }] } }));
  t.equal(r.code, 1);
  t.match(r.json, { code: 7, msg: /prevResult\.ips\[0\]\.address must be an IP address in CIDR notation/ });
  t.equal(handler.count('add'), 0);
});

t.test('missing or invalid environment is code 4 naming the variable', async (t) => {
  const noNetns: Record<string, string> = podEnv('ADD');
  delete noNetns.CNI_NETNS;
  t.match((await runCni(noNetns, conf())).json, { code: 4, msg: /CNI_NETNS/ });
  t.match((await runCni({ CNI_CONTAINERID: 'x' }, conf())).json, { code: 4, msg: /CNI_COMMAND/ });
  t.match((await runCni({ ...podEnv('ADD'), CNI_COMMAND: 'FROB' }, conf())).json, { code: 4, msg: /unknown CNI_COMMAND "FROB"/ });
  t.match((await runCni({ ...podEnv('ADD'), CNI_CONTAINERID: '-bad' }, conf())).json, { code: 4, msg: /CNI_CONTAINERID has invalid characters/ });
  t.match((await runCni({ ...podEnv('ADD'), CNI_IFNAME: 'averyveryverylongname' }, conf())).json, { code: 4, msg: /CNI_IFNAME is longer than 15 bytes/ });
  t.match((await runCni({ ...podEnv('ADD'), CNI_ARGS: 'K8S_POD_NAME' }, conf())).json, { code: 4, msg: /CNI_ARGS/ });
  const gc = await runCni({ CNI_COMMAND: 'GC' }, conf({ cniVersion: '1.1.0', prevResult: undefined, 'cni.dev/valid-attachments': [] }));
  t.match(gc.json, { code: 4, msg: /CNI_PATH/ });
  const delNoNetns: Record<string, string> = podEnv('DEL');
  delete delNoNetns.CNI_NETNS;
  const del = await runCni(delNoNetns, conf({ prevResult: undefined }));
  t.equal(del.code, 0, 'DEL does not need CNI_NETNS');
  t.same(handler.calls.map((c) => `${c.op}:${c.phase}`), ['del:start', 'del:end'], 'only the valid DEL reached the agent');
});

t.test('invalid network config is code 7', async (t) => {
  t.match((await runCni(podEnv('ADD'), conf({ name: 'bad name' }))).json, { code: 7, msg: /"name" has invalid characters/ });
  t.match((await runCni(podEnv('ADD'), conf({ socketPath: 'relative.sock' }))).json, { code: 7, msg: /socketPath/ });
  t.match((await runCni(podEnv('ADD'), conf({ timeoutSeconds: -1 }))).json, { code: 7, msg: /timeoutSeconds/ });
});

t.test("a handler's CniError reaches the runtime with code, msg and details", async (t) => {
  handler.behave = async (op) => {
    if (op === 'add') throw new CniError(100, 'attach failed: host veth not found', 'step 1: no veth peer of eth0 in /var/run/netns/cn-pod');
    if (op === 'check') throw new CniError(102, 'missing: OVS port, route to 10.99.7.2 via antrea-gw0');
  };
  const a = await runCni(podEnv('ADD'), conf());
  t.equal(a.code, 1);
  t.same(a.json, { cniVersion: '0.4.0', code: 100, msg: 'attach failed: host veth not found', details: 'step 1: no veth peer of eth0 in /var/run/netns/cn-pod' });
  const c = await runCni(podEnv('CHECK'), conf());
  t.equal(c.code, 1);
  t.match(c.json, { code: 102, msg: 'missing: OVS port, route to 10.99.7.2 via antrea-gw0' });
});

t.test('any other handler exception becomes a sluice code (>= 100) with its message', async (t) => {
  handler.behave = async (op) => {
    if (op === 'add') throw new Error('ovs-vsctl: database connection failed');
  };
  const a = await runCni(podEnv('ADD'), conf());
  t.equal(a.code, 1);
  t.match(a.json, { code: 100, msg: 'ovs-vsctl: database connection failed' });
});

t.test('CHECK, DEL, STATUS and GC print nothing on success', async (t) => {
  for (const [env, config] of [
    [podEnv('CHECK'), conf()],
    [podEnv('DEL'), conf()],
    [{ CNI_COMMAND: 'STATUS' }, conf({ cniVersion: '1.1.0', prevResult: undefined })],
    [
      { CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' },
      conf({ cniVersion: '1.1.0', prevResult: undefined, 'cni.dev/valid-attachments': [{ containerID: 'keep1', ifname: 'eth0' }] }),
    ],
  ] as const) {
    const r = await runCni(env, config);
    t.equal(r.code, 0, `${env.CNI_COMMAND}: ${r.stderr}`);
    t.equal(r.stdout, '', `${env.CNI_COMMAND}: empty stdout`);
  }
  t.same(
    handler.calls.filter((c) => c.phase === 'end').map((c) => c.op),
    ['check', 'del', 'status', 'gc'],
  );
  const gc = handler.calls.find((c) => c.op === 'gc');
  t.match(gc, { valid: [{ containerId: 'keep1', ifName: 'eth0' }], networkName: 'k8s-pod-network' });
});

t.test('DEL is best-effort: an unusable prevResult does not block it', async (t) => {
  const r = await runCni(podEnv('DEL'), conf({ prevResult: 'junk' }));
  t.equal(r.code, 0, r.stdout);
  const del = handler.calls.find((c) => c.op === 'del');
  if (del?.op !== 'del') throw new Error('expected a del call');
  t.equal(del.req.prevResult, undefined, 'handler gets no prevResult');
  t.ok(lines.some((l) => typeof l.msg === 'string' && l.msg.includes('ignoring unusable prevResult on DEL')), 'agent logs why');
  const add = await runCni(podEnv('ADD'), conf({ prevResult: 'junk' }));
  t.match(add.json, { code: 7, msg: /"prevResult" must be a JSON object/ }, 'ADD stays strict');
});

t.test('STATUS reports the handler saying not ready as 50', async (t) => {
  handler.behave = async (op) => {
    if (op === 'status') throw new CniError(50, 'sluice-agent is not ready: reconciling OVS ports');
  };
  const r = await runCni({ CNI_COMMAND: 'STATUS' }, conf({ cniVersion: '1.1.0', prevResult: undefined }));
  t.equal(r.code, 1);
  t.same(r.json, { cniVersion: '1.1.0', code: 50, msg: 'sluice-agent is not ready: reconciling OVS ports', details: '' });
});

t.test('agent down: ADD/CHECK 11 naming the socket, STATUS 50, DEL and GC succeed', async (t) => {
  const gone = join(tmp.dir, 'nothing-here', 'cni.sock');
  const add = await runCni(podEnv('ADD'), conf({ socketPath: gone }));
  t.equal(add.code, 1);
  t.match(add.json, { cniVersion: '0.4.0', code: 11 });
  t.match(add.json?.msg, gone, 'msg names the socket');
  t.match(add.json?.msg, /is sluice-agent running on this node\?.*kubectl -n kube-system get pods -l app=sluice-agent/);
  t.match((await runCni(podEnv('CHECK'), conf({ socketPath: gone }))).json, { code: 11 });
  const status = await runCni({ CNI_COMMAND: 'STATUS' }, conf({ cniVersion: '1.1.0', prevResult: undefined, socketPath: gone }));
  t.equal(status.code, 1);
  t.match(status.json, { code: 50, msg: /not reachable/ });
  const del = await runCni(podEnv('DEL'), conf({ socketPath: gone }));
  t.equal(del.code, 0, 'DEL never wedges teardown');
  t.equal(del.stdout, '');
  t.match(del.stderr, /reporting DEL as successful, sluice-agent cleans up at its next start/);
  const gc = await runCni(
    { CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' },
    conf({ cniVersion: '1.1.0', prevResult: undefined, socketPath: gone, 'cni.dev/valid-attachments': [] }),
  );
  t.equal(gc.code, 0);
  t.match(gc.stderr, /reporting GC as successful/);
});

t.test('a stale socket file (agent crashed) is "unreachable" too', async (t) => {
  const stale = join(tmp.dir, 'stale.sock');
  makeStaleSocket(stale);
  const add = await runCni(podEnv('ADD'), conf({ socketPath: stale }));
  t.match(add.json, { code: 11, msg: /ECONNREFUSED/ });
});

t.test('an agent that answers garbage or hangs up: ADD 5/11, STATUS 50, DEL succeeds', async (t) => {
  const fakePath = join(tmp.dir, 'fake.sock');
  let mode: 'garbage' | 'hangup' = 'garbage';
  const fake = createServer((sock) => {
    sock.once('data', () => (mode === 'garbage' ? sock.end('this is not json\n') : sock.destroy()));
  });
  await new Promise<void>((r) => fake.listen(fakePath, r));
  t.teardown(() => new Promise<void>((r) => fake.close(() => r())));

  t.match((await runCni(podEnv('ADD'), conf({ socketPath: fakePath }))).json, { code: 5, msg: /unreadable answer/ });
  t.match((await runCni({ CNI_COMMAND: 'STATUS' }, conf({ cniVersion: '1.1.0', socketPath: fakePath }))).json, { code: 50 });
  t.equal((await runCni(podEnv('DEL'), conf({ socketPath: fakePath }))).code, 0);
  mode = 'hangup';
  t.match((await runCni(podEnv('ADD'), conf({ socketPath: fakePath }))).json, { code: 11, msg: /closed the connection without answering/ });
});

t.test('repeated ADD for one container is serialized; other containers are not held up', async (t) => {
  const g = gate();
  handler.behave = async (op, req) => {
    if (op === 'add' && req?.containerId === 'same01') await g.opened;
  };
  const received = () => lines.filter((l) => l.msg === 'cni: request received' && l.containerId === 'same01').length;
  const before = received();
  const first = runCni(podEnv('ADD', 'same01'), conf());
  await until(() => handler.count('add') === 1, 'first ADD reaches the handler');
  const second = runCni(podEnv('ADD', 'same01'), conf());
  await until(() => received() === before + 2, 'second ADD reaches the server');
  t.equal(handler.count('add'), 1, 'second ADD waits while the first runs');

  const other = await runCni(podEnv('ADD', 'other01'), conf());
  t.equal(other.code, 0, 'another container completes meanwhile');
  t.equal(handler.count('add', 'end'), 1, 'only other01 has finished');

  g.open();
  const [a, b] = await Promise.all([first, second]);
  t.equal(a.code, 0);
  t.equal(b.code, 0);
  t.same(a.json, PTP_040);
  t.same(b.json, PTP_040, 'a repeated ADD returns the same result');
  const same = handler.calls.filter((c) => c.op === 'add' && c.req.containerId === 'same01').map((c) => c.phase);
  t.same(same, ['start', 'end', 'start', 'end'], 'never two at once for one container');
});

t.test('a timed-out ADD fails with 11, a timed-out DEL succeeds, and the agent finishes the work anyway', async (t) => {
  const g = gate();
  handler.behave = async (op) => {
    if (op === 'add' || op === 'del') await g.opened;
  };
  const add = await runCni(podEnv('ADD', 'slow01'), conf({ timeoutSeconds: 0.3 }));
  t.equal(add.code, 1);
  t.match(add.json, { code: 11, msg: /did not answer ADD within 0\.3 s/ });
  const del = runCni(podEnv('DEL', 'slow01'), conf({ timeoutSeconds: 0.3 }));
  t.equal((await del).code, 0);
  t.match((await del).stderr, /did not answer DEL.*reporting DEL as successful/);
  t.equal(handler.count('add', 'end'), 0);
  g.open();
  await until(() => handler.count('del', 'end') === 1, 'the agent completes ADD then DEL');
  t.same(
    handler.calls.filter((c) => c.op !== 'status').map((c) => `${c.op}:${c.phase}`),
    ['add:start', 'add:end', 'del:start', 'del:end'],
  );
  await until(() => lines.some((l) => l.msg === 'cni: client went away before the answer; the operation completed anyway'), 'server notes the vanished client');
});
