import t from 'tap';
import {
  compareVersions,
  containerIdError,
  ifNameError,
  networkNameError,
  parseCniArgs,
  versionError,
} from '../../cni/protocol.js';
import { CniError } from '../../daemon/cni/errors.js';
import { parseRequest, parseValidAttachments } from '../../daemon/cni/request.js';
import { PTP_040 } from './cni-fixtures.js';

t.test('container ids follow the spec charset', async (t) => {
  for (const ok of ['a', '0', 'abc-1.2_3', 'f00dcafe'.repeat(8)]) t.equal(containerIdError(ok), undefined, ok);
  t.match(containerIdError(''), { code: 4, msg: /CNI_CONTAINERID is empty/ });
  for (const bad of ['-abc', '_a', '.a', 'a/b', 'a b', 'a:b', 'ä']) t.match(containerIdError(bad), { code: 4, msg: /invalid characters/, details: bad }, bad);
});

t.test('interface names follow Linux rules', async (t) => {
  for (const ok of ['eth0', 'net1', 'a'.repeat(15)]) t.equal(ifNameError(ok), undefined, ok);
  t.match(ifNameError(''), { code: 4, msg: /CNI_IFNAME is empty/ });
  t.match(ifNameError('a'.repeat(16)), { code: 4, msg: /longer than 15/ });
  t.match(ifNameError('..'), { code: 4, msg: /"\." or "\.\."/ });
  for (const bad of ['a/b', 'a:b', 'a b', 'a\tb']) t.match(ifNameError(bad), { code: 4, msg: /must not contain/ }, JSON.stringify(bad));
});

t.test('network names', async (t) => {
  t.equal(networkNameError('k8s-pod-network'), undefined);
  t.match(networkNameError(undefined), { code: 7, msg: /no "name"/ });
  t.match(networkNameError(5), { code: 7, msg: /must be a string/ });
  t.match(networkNameError('bad/name'), { code: 7, msg: /invalid characters/, details: 'bad/name' });
});

t.test('versions: supported set, missing, and per-command minimums', async (t) => {
  for (const v of ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']) t.equal(versionError(v, 'ADD'), undefined, v);
  t.match(versionError('0.2.0', 'ADD'), { code: 1, msg: /incompatible CNI version "0\.2\.0".*0\.3\.0, 0\.3\.1, 0\.4\.0, 1\.0\.0, 1\.1\.0/ });
  t.match(versionError('2.0.0', 'DEL'), { code: 1 });
  t.match(versionError(undefined, 'ADD'), { code: 1, msg: /no "cniVersion"/ });
  t.match(versionError(1, 'ADD'), { code: 7, msg: /must be a string/ });
  t.match(versionError('0.3.1', 'CHECK'), { code: 1, msg: /does not allow CHECK.*0\.4\.0/ });
  t.equal(versionError('0.4.0', 'CHECK'), undefined);
  t.match(versionError('1.0.0', 'STATUS'), { code: 1, msg: /does not allow STATUS/ });
  t.match(versionError('1.0.0', 'GC'), { code: 1, msg: /does not allow GC/ });
  t.equal(versionError('1.1.0', 'GC'), undefined);
  t.ok(compareVersions('0.10.0', '0.4.0') > 0);
  t.equal(compareVersions('1.0.0', '1.0.0'), 0);
});

t.test('CNI_ARGS parsing', async (t) => {
  t.same(parseCniArgs(''), { args: {} });
  t.same(parseCniArgs('IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;'), {
    args: { IgnoreUnknown: '1', K8S_POD_NAMESPACE: 'default', K8S_POD_NAME: 'web-0' },
  });
  t.same(parseCniArgs('A=x=y'), { args: { A: 'x=y' } }, 'value keeps later "="');
  t.same(parseCniArgs('A='), { args: { A: '' } });
  t.match(parseCniArgs('A=1;junk'), { error: { code: 4, msg: /CNI_ARGS: "junk" is not a KEY=VALUE pair/ } });
  t.match(parseCniArgs('=1'), { error: { code: 4 } });
});

const base = (command: string, config: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => ({
  command,
  containerId: 'c0ffee',
  netns: '/var/run/netns/cn-x',
  ifName: 'eth0',
  args: { K8S_POD_NAMESPACE: 'ns1', K8S_POD_NAME: 'web-0' },
  cniPath: '/opt/cni/bin',
  config: { cniVersion: '0.4.0', name: 'k8s', type: 'sluice-cni', prevResult: PTP_040, ...config },
  ...extra,
});

function codeOf(fn: () => unknown): number | undefined {
  try {
    fn();
  } catch (err) {
    if (err instanceof CniError) return err.code;
    throw err;
  }
  return undefined;
}

t.test('parseRequest builds a PodRequest for ADD', async (t) => {
  const p = parseRequest(base('ADD'));
  if (p.command !== 'ADD') throw new Error('wrong command');
  t.equal(p.pod.containerId, 'c0ffee');
  t.equal(p.pod.podNamespace, 'ns1');
  t.equal(p.pod.podName, 'web-0');
  t.equal(p.pod.cniVersion, '0.4.0');
  t.equal(p.pod.networkName, 'k8s');
  t.same(p.pod.prevResult?.ips, [{ interface: 1, address: '10.99.7.2/24', gateway: '10.99.7.1' }], 'normalized to 1.x');
  t.same(p.warnings, []);
});

t.test('parseRequest rejects bad requests with the spec code', async (t) => {
  t.equal(codeOf(() => parseRequest('x')), 6);
  t.equal(codeOf(() => parseRequest(base('FROB'))), 4);
  t.equal(codeOf(() => parseRequest(base('VERSION'))), 4);
  t.equal(codeOf(() => parseRequest({ ...base('ADD'), config: 'x' })), 6);
  t.equal(codeOf(() => parseRequest(base('ADD', { cniVersion: '0.2.0' }))), 1);
  t.equal(codeOf(() => parseRequest(base('ADD', { name: '' }))), 7);
  t.equal(codeOf(() => parseRequest(base('ADD', {}, { containerId: '-x' }))), 4);
  t.equal(codeOf(() => parseRequest(base('ADD', {}, { ifName: 'a'.repeat(16) }))), 4);
  t.equal(codeOf(() => parseRequest(base('ADD', {}, { netns: '' }))), 4);
  t.equal(codeOf(() => parseRequest(base('ADD', {}, { args: { A: 1 } }))), 6);
  t.equal(codeOf(() => parseRequest(base('ADD', { prevResult: { ips: [{ address: 'nope' }] } }))), 7);
  t.throws(() => parseRequest(base('ADD', { prevResult: undefined })), { code: 7, message: /chained after a primary CNI plugin/ });
  t.throws(() => parseRequest(base('CHECK', { prevResult: undefined })), { code: 7, message: /CHECK got no prevResult/ });
});

t.test('DEL is lenient: no netns, no prevResult, or an unusable prevResult still parse', async (t) => {
  const a = parseRequest(base('DEL', { prevResult: undefined }, { netns: '' }));
  t.equal(a.command, 'DEL');
  const b = parseRequest(base('DEL', { prevResult: { ips: [{ address: 'nope' }] } }));
  if (b.command !== 'DEL') throw new Error('wrong command');
  t.equal(b.pod.prevResult, undefined);
  t.match(b.warnings, [/ignoring unusable prevResult on DEL: prevResult\.ips\[0\]\.address/]);
});

t.test('STATUS and GC need cniVersion 1.1.0; GC needs the valid-attachments list', async (t) => {
  t.equal(codeOf(() => parseRequest(base('STATUS', { cniVersion: '1.0.0' }))), 1);
  t.same(parseRequest(base('STATUS', { cniVersion: '1.1.0', prevResult: undefined })), { command: 'STATUS', warnings: [] });
  const gc = parseRequest(
    base('GC', { cniVersion: '1.1.0', prevResult: undefined, 'cni.dev/valid-attachments': [{ containerID: 'a1', ifname: 'eth0' }] }, { containerId: '' }),
  );
  t.same(gc, { command: 'GC', networkName: 'k8s', valid: [{ containerId: 'a1', ifName: 'eth0' }], warnings: [] });
  t.throws(() => parseRequest(base('GC', { cniVersion: '1.1.0' })), { code: 7, message: /cni\.dev\/valid-attachments/ });
});

t.test('parseValidAttachments accepts the legacy key and names bad entries', async (t) => {
  t.same(parseValidAttachments({ 'cni.dev/attachments': [] }), []);
  t.same(parseValidAttachments({ 'cni.dev/valid-attachments': [{ containerID: 'x', ifname: 'eth0' }] }), [{ containerId: 'x', ifName: 'eth0' }]);
  t.throws(() => parseValidAttachments({ 'cni.dev/valid-attachments': {} }), { code: 7, message: /must be a list/ });
  t.throws(() => parseValidAttachments({ 'cni.dev/valid-attachments': [{ containerID: 'x' }] }), { code: 7, message: /\[0\] must be an object/ });
});
