/**
 * Hostile input to the agent's own parsers: CNI requests (the CNI socket), DNS replies and the
 * frames they arrive in (packet-ins), and policy punt metadata. Valid inputs are mutated at random
 * (bytes flipped, truncated, extended; JSON values replaced) with a fixed seed: each parser answers
 * with its own kind of error, never an unexpected exception.
 */
import t, { type Test } from 'tap';
import { parseRequest } from '../../daemon/cni/request.js';
import { normalizeResult } from '../../daemon/cni/result.js';
import { CniError } from '../../daemon/cni/errors.js';
import { parseDnsMessage } from '../../daemon/enforcement/fqdn/dnswire.js';
import { extractDnsPayload } from '../../daemon/enforcement/fqdn/frame.js';
import { decodePolicyPuntExtra } from '../../daemon/flows/policy/punt.js';
import { PTP_040, PTP_100, DUAL_110 } from './cni-fixtures.js';
import { simpleResponse, tcpDnsFrame, udpDnsFrame } from './fqdn-helpers.js';
import { rng, type Rng } from './policy-core-helpers.js';

function mutateBytes(r: Rng, b: Buffer): Buffer {
  const out = Buffer.from(b);
  switch (r.int(4)) {
    case 0: return out.subarray(0, r.int(out.length + 1));
    case 1: for (let i = 0; i < 1 + r.int(4); i++) out[r.int(out.length)] = r.int(256); return out;
    case 2: return Buffer.concat([out, Buffer.from(Array.from({ length: 1 + r.int(64) }, () => r.int(256)))]);
    default: return Buffer.from(Array.from({ length: r.int(600) }, () => r.int(256)));
  }
}

const HOSTILE: unknown[] = [null, 0, -1, 2 ** 53, 1.5, '', 'x'.repeat(5000), true, [], [null], {}, { __proto__x: 1 }, '../../etc/passwd', '\u0000'];

function mutateJson(r: Rng, v: unknown): unknown {
  const copy = JSON.parse(JSON.stringify(v));
  const slots: { parent: any; key: string | number }[] = [];
  const walk = (x: any) => {
    if (Array.isArray(x)) x.forEach((y, i) => { slots.push({ parent: x, key: i }); walk(y); });
    else if (x && typeof x === 'object') for (const k of Object.keys(x)) { slots.push({ parent: x, key: k }); walk(x[k]); }
  };
  walk(copy);
  for (let n = 0; n < 1 + r.int(3) && slots.length > 0; n++) {
    const s = r.pick(slots);
    if (r.int(5) === 0 && !Array.isArray(s.parent)) Object.defineProperty(s.parent, r.pick(['constructor', '__proto__', 'toString']), { value: r.pick(HOSTILE), enumerable: true, writable: true, configurable: true });
    else s.parent[s.key] = JSON.parse(JSON.stringify(r.pick(HOSTILE)) ?? 'null');
  }
  return copy;
}

/** Runs fn; an exception that `expected` does not accept fails the test with the input. */
function survives(t: Test, what: string, input: unknown, fn: () => unknown, expected: (e: unknown) => boolean = () => false): boolean {
  try {
    fn();
    return true;
  } catch (err) {
    if (expected(err)) return true;
    t.fail(`${what}: ${(err as Error).stack}`, { input: Buffer.isBuffer(input) ? input.toString('hex') : JSON.stringify(input) });
    return false;
  }
}

t.test('DNS messages and the frames carrying them: parse results, never exceptions', async (t) => {
  const r = rng(1009);
  const message = simpleResponse('api.example.com', [{ ip: '192.0.2.10', ttl: 30 }, { ip: '192.0.2.11', ttl: 60 }]);
  const frames = [udpDnsFrame('10.96.0.10', '10.0.0.5', message), tcpDnsFrame('10.96.0.10', '10.0.0.5', message)];
  let rejected = 0;
  for (let i = 0; i < 3000; i++) {
    const m = mutateBytes(r, message);
    if (!survives(t, 'parseDnsMessage', m, () => { if (!parseDnsMessage(m).ok) rejected++; })) return;
    const f = mutateBytes(r, r.pick(frames));
    if (!survives(t, 'extractDnsPayload', f, () => {
      const p = extractDnsPayload(f);
      if (p.ok) parseDnsMessage(p.payload.message);
    })) return;
  }
  t.ok(rejected > 100, `malformed messages are refused with a reason (${rejected})`);
});

t.test('CNI requests: only CniError (with a code) comes out of the request and result parsers', async (t) => {
  const r = rng(2003);
  const base = {
    command: 'ADD', containerId: 'c0ffee', netns: '/var/run/netns/cn-x', ifName: 'eth0',
    args: { K8S_POD_NAMESPACE: 'ns1', K8S_POD_NAME: 'web-0' }, cniPath: '/opt/cni/bin',
    config: { cniVersion: '0.4.0', name: 'k8s', type: 'sluice-cni', prevResult: PTP_040 },
  };
  const isCniError = (e: unknown) => e instanceof CniError && typeof e.code === 'number';
  let refused = 0;
  for (let i = 0; i < 3000; i++) {
    const req = mutateJson(r, base);
    if (!survives(t, 'parseRequest', req, () => parseRequest(req), (e) => (isCniError(e) ? ++refused > 0 : false))) return;
    const result = mutateJson(r, r.pick([PTP_040, PTP_100, DUAL_110]));
    if (!survives(t, 'normalizeResult', result, () => normalizeResult(result), isCniError)) return;
  }
  t.ok(refused > 100, `malformed requests are refused with a CNI error code (${refused})`);
});

t.test('policy punt metadata of any length decodes or is refused, never throws', async (t) => {
  const r = rng(3001);
  for (let i = 0; i < 2000; i++) {
    const extra = Buffer.from(Array.from({ length: r.int(40) }, () => r.int(256)));
    if (!survives(t, 'decodePolicyPuntExtra', extra, () => decodePolicyPuntExtra(extra))) return;
  }
  t.pass('2000 random punt payloads');
});
