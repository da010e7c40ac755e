/**
 * The native front end (cni/native/sluice-cni.c) beside the standalone plugin: for a corpus of
 * valid and invalid invocations, both print the same bytes and exit the same way against the same
 * agent; what the front end cannot interpret (an escaped "socketPath", a nested one, a config
 * over its size limit) reaches the standalone plugin intact; an agent of another version that
 * answers the invocation with a JSON line is asked again in the JSON request form; and the front
 * end alone, without the standalone plugin beside it, still serves every forwarded command and
 * fails clearly for the rest.
 */
import { copyFileSync, mkdirSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { startCniServer, CniError } from '../../daemon/cni/server.js';
import { PTP_040, PTP_100 } from './cni-fixtures.js';
import { FRONT_END_BINARY, RecordingHandler, STANDALONE_BINARY, buildCniBinary, capturingLogger, runCni, tempDir, type CniRun } from './cni-harness.js';

buildCniBinary();
const tmp = tempDir();
t.teardown(tmp.remove);
const socketPath = join(tmp.dir, 'run', 'cni.sock');
const handler = new RecordingHandler();
const { log } = capturingLogger();
const server = await startCniServer(socketPath, handler, log);
t.teardown(() => server.close());

const podEnv = (command: string, extra: Record<string, string> = {}) => ({
  CNI_COMMAND: command,
  CNI_CONTAINERID: 'fe01',
  CNI_NETNS: '/var/run/netns/cn-pod',
  CNI_IFNAME: 'eth0',
  CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0',
  CNI_PATH: '/opt/cni/bin',
  ...extra,
});
const conf = (extra: Record<string, unknown> = {}) => JSON.stringify({ cniVersion: '0.4.0', name: 'k8s-pod-network', type: 'sluice-cni', socketPath, prevResult: PTP_040, ...extra });

/** What a run printed and how it exited, for comparing two runs. */
const seen = (r: CniRun) => ({ code: r.code, stdout: r.stdout, stderr: r.stderr });

t.test('front end and standalone plugin print the same for the same invocation', async (t) => {
  const gone = join(tmp.dir, 'nobody-listens.sock');
  const cases: Array<[string, Record<string, string>, string]> = [
    ['ADD 0.4.0', podEnv('ADD'), conf()],
    ['ADD 1.0.0', podEnv('ADD'), conf({ cniVersion: '1.0.0', prevResult: PTP_100 })],
    ['ADD with unicode and control characters in strings', podEnv('ADD'), conf({ note: 'naïve\ttab\u0001 "quoted" \\ back' })],
    ['ADD with the last of two socketPath keys', podEnv('ADD'), conf().replace('{', `{"socketPath":"${gone}",`)],
    ['ADD with timeoutSeconds', podEnv('ADD'), conf({ timeoutSeconds: 2.5 })],
    ['CHECK', podEnv('CHECK'), conf()],
    ['DEL', podEnv('DEL'), conf()],
    ['STATUS', { CNI_COMMAND: 'STATUS' }, conf({ cniVersion: '1.1.0', prevResult: undefined })],
    ['GC', { CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' }, conf({ cniVersion: '1.1.0', prevResult: undefined, 'cni.dev/valid-attachments': [] })],
    ['VERSION', { CNI_COMMAND: 'VERSION' }, '{"cniVersion":"1.0.0"}'],
    ['no CNI_COMMAND', { CNI_CONTAINERID: 'x' }, conf()],
    ['unknown command', podEnv('FROB'), conf()],
    ['missing CNI_NETNS', { ...podEnv('ADD'), CNI_NETNS: '' }, conf()],
    ['bad container id', podEnv('ADD', { CNI_CONTAINERID: '-bad' }), conf()],
    ['bad interface name', podEnv('ADD', { CNI_IFNAME: 'averyveryverylongname' }), conf()],
    ['bad CNI_ARGS', podEnv('ADD', { CNI_ARGS: 'K8S_POD_NAME' }), conf()],
    ['unsupported version', podEnv('ADD'), conf({ cniVersion: '0.2.0' })],
    ['CHECK on 0.3.1', podEnv('CHECK'), conf({ cniVersion: '0.3.1' })],
    ['no name', podEnv('ADD'), conf({ name: undefined })],
    ['no prevResult', podEnv('ADD'), conf({ prevResult: undefined })],
    ['prevResult an array', podEnv('ADD'), conf({ prevResult: [] })],
    ['prevResult with a bad address (the agent refuses it)', podEnv('ADD'), conf({ prevResult: { ...PTP_040, ips: [{ version: '4', address: '10.99.7.2' }] } })],
    ['relative socketPath', podEnv('ADD'), conf({ socketPath: 'relative.sock' })],
    ['negative timeoutSeconds', podEnv('ADD'), conf({ timeoutSeconds: -1 })],
    ['timeoutSeconds a string', podEnv('ADD'), conf({ timeoutSeconds: '5' })],
    ['socketPath spelled with an escape', podEnv('ADD'), conf({ socketPath: undefined }).replace('{', `{"socket\\u0050ath":${JSON.stringify(socketPath)},`)],
    ['socketPath only inside a nested object (the default socket, nobody there)', podEnv('ADD'), conf({ socketPath: undefined, nested: { socketPath } })],
    ['malformed JSON', podEnv('ADD'), '{"cniVersion": "1.0.0", '],
    ['trailing garbage after the object', podEnv('ADD'), `${conf()} x`],
    ['a JSON array', podEnv('ADD'), '[1,2]'],
    ['empty stdin', podEnv('ADD'), ''],
    ['agent unreachable: ADD', podEnv('ADD'), conf({ socketPath: gone })],
    ['agent unreachable: DEL', podEnv('DEL'), conf({ socketPath: gone })],
    ['agent unreachable: STATUS', { CNI_COMMAND: 'STATUS' }, conf({ cniVersion: '1.1.0', socketPath: gone })],
    ['a config over the front end limit (3 MiB)', podEnv('ADD'), conf({ padding: 'p'.repeat(3_200_000) })],
  ];
  for (const [what, env, stdin] of cases) {
    const front = await runCni(env, stdin, FRONT_END_BINARY);
    const alone = await runCni(env, stdin, STANDALONE_BINARY);
    t.same(seen(front), seen(alone), what);
  }
  // Not a vacuous comparison: the corpus has successes, agent refusals and local refusals.
  const codes = new Set<number | null>();
  for (const [, env, stdin] of cases.slice(0, 3)) codes.add((await runCni(env, stdin, FRONT_END_BINARY)).code);
  t.same([...codes], [0], 'the first cases succeed');
  t.ok(handler.count('add', 'end') >= 10, 'the successful ADDs reached the agent');
});

t.test('a handler error reaches both the same way', async (t) => {
  handler.behave = async (op) => {
    if (op === 'add') throw new CniError(100, 'attach-port: ovs-vswitchd refused the port', 'step attach-port; rolled back');
  };
  t.teardown(() => (handler.behave = async () => undefined));
  const front = await runCni(podEnv('ADD'), conf(), FRONT_END_BINARY);
  const alone = await runCni(podEnv('ADD'), conf(), STANDALONE_BINARY);
  t.same(seen(front), seen(alone));
  t.match(front.json, { cniVersion: '0.4.0', code: 100, msg: 'attach-port: ovs-vswitchd refused the port', details: 'step attach-port; rolled back' });
});

/** A fake agent answering each connection's first line with what `answer` returns for it. */
async function fakeAgent(path: string, answer: (line: string) => string | undefined): Promise<{ lines: string[] }> {
  const lines: string[] = [];
  const fake = createServer((sock: Socket) => {
    let got = '';
    sock.on('data', (d: Buffer) => {
      got += d.toString();
      const nl = got.indexOf('\n');
      if (nl < 0) return;
      const line = got.slice(0, nl);
      lines.push(line);
      const reply = answer(line);
      if (reply === undefined) sock.destroy();
      else sock.end(reply);
    });
  });
  await new Promise<void>((r) => fake.listen(path, r));
  t.teardown(() => new Promise<void>((r) => fake.close(() => r())));
  return { lines };
}

t.test('an agent that answers the invocation with a JSON line is asked again in the JSON request form', async (t) => {
  const path = join(tmp.dir, 'older-agent.sock');
  const fake = await fakeAgent(path, (line) => {
    const req = JSON.parse(line) as { invocation?: unknown; command?: string };
    if (req.invocation !== undefined) return `${JSON.stringify({ ok: false, code: 6, msg: 'request field "command" must be a string' })}\n`;
    return `${JSON.stringify({ ok: true, result: PTP_040 })}\n`;
  });
  const r = await runCni(podEnv('ADD'), conf({ socketPath: path }), FRONT_END_BINARY);
  t.equal(r.code, 0, r.stderr);
  t.same(r.json, PTP_040);
  t.equal(fake.lines.length, 2);
  t.match(JSON.parse(fake.lines[0]!), { invocation: { env: { CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'fe01' }, stdin: conf({ socketPath: path }) } });
  t.notOk('PATH' in (JSON.parse(fake.lines[0]!) as { invocation: { env: object } }).invocation.env, 'only CNI_* variables are sent');
  t.match(JSON.parse(fake.lines[1]!), { command: 'ADD', containerId: 'fe01' });
});

t.test('an answer whose header lies about its length is unreadable (5), and DEL still succeeds', async (t) => {
  const path = join(tmp.dir, 'liar.sock');
  await fakeAgent(path, () => '0 100 0\n{"short":true}\n');
  const add = await runCni(podEnv('ADD'), conf({ socketPath: path }), FRONT_END_BINARY);
  t.match(add.json, { code: 5, msg: /unreadable answer to ADD \(answer cut short\)/ });
  const del = await runCni(podEnv('DEL'), conf({ socketPath: path }), FRONT_END_BINARY);
  t.equal(del.code, 0);
  t.match(del.stderr, /reporting DEL as successful/);
});

t.test('the front end alone serves forwarded commands, and names the missing standalone plugin otherwise', async (t) => {
  const dir = join(tmp.dir, 'bin-front-only');
  mkdirSync(dir);
  const lone = join(dir, 'sluice-cni');
  copyFileSync(FRONT_END_BINARY, lone);
  const before = handler.count('add', 'end');
  const add = await runCni(podEnv('ADD'), conf(), lone);
  t.equal(add.code, 0, 'an ADD with the agent up needs nothing but the front end');
  t.same(add.json, PTP_040);
  t.equal(handler.count('add', 'end'), before + 1);
  const refused = await runCni(podEnv('ADD', { CNI_CONTAINERID: '-bad' }), conf(), lone);
  t.match(refused.json, { code: 4, msg: /CNI_CONTAINERID has invalid characters/ }, "the agent's checks answer for it");

  const version = await runCni({ CNI_COMMAND: 'VERSION' }, '{"cniVersion":"1.0.0"}', lone);
  t.equal(version.code, 1);
  t.match(version.json, { code: 50, msg: new RegExp(`cannot run ${join(dir, 'sluice-cni-standalone')}.*reinstall sluice`) });
  const gone = join(tmp.dir, 'nobody.sock');
  const del = await runCni(podEnv('DEL'), conf({ socketPath: gone }), lone);
  t.equal(del.code, 0, 'DEL never wedges teardown, even on a broken installation');
  t.match(del.stderr, /cannot run .*sluice-cni-standalone/);
  const addDown = await runCni(podEnv('ADD'), conf({ socketPath: gone }), lone);
  t.match(addDown.json, { code: 50 });
});
