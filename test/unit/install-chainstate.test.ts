/**
 * Which CNI configuration the runtime uses and how sluice is chained into it (pure): libcni's order
 * (sorted names, first file that loads), the AWS VPC CNI's own conflist, single-plugin files, a new
 * file sorting first, unusable files, idempotence.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { planChain, runtimeConfig, type ConfFile } from '../../install/chainstate.js';
import { ROOT } from './cni-harness.js';

const AWS = readFileSync(join(ROOT, 'test', 'fixtures', 'aws-vpc-cni-10-aws.conflist'), 'utf8');
const ptpConf = JSON.stringify({ cniVersion: '1.0.0', name: 'k8s', type: 'ptp', ipam: { type: 'host-local', subnet: '10.10.1.0/24' } });
const types = (text: string) => (JSON.parse(text) as { plugins: { type: string }[] }).plugins.map((p) => p.type);

t.test('the AWS VPC CNI conflist: sluice right after aws-cni and its egress-cni, portmap kept in order, every field kept', async (t) => {
  const plan = planChain([{ name: '10-aws.conflist', text: AWS }], { socketPath: '/var/run/sluice/cni.sock' });
  if (plan.action !== 'write') throw new Error(`expected a write, got ${plan.action}`);
  t.equal(plan.target, '10-aws.conflist');
  t.notOk(plan.remove);
  t.same(types(plan.text), ['aws-cni', 'egress-cni', 'sluice-cni', 'portmap']);
  const written = JSON.parse(plan.text);
  const original = JSON.parse(AWS);
  t.same({ ...written, plugins: written.plugins.filter((p: { type: string }) => p.type !== 'sluice-cni') }, original, 'nothing else changed (disableCheck, names, ipam)');
  t.same(written.plugins[2], { socketPath: '/var/run/sluice/cni.sock', type: 'sluice-cni' });
  t.same(planChain([{ name: '10-aws.conflist', text: plan.text }], { socketPath: '/var/run/sluice/cni.sock' }), { action: 'keep', file: '10-aws.conflist', skipped: [] }, 'chained: nothing to write');
  const reordered = JSON.parse(plan.text);
  reordered.plugins[2] = { type: 'sluice-cni', socketPath: '/var/run/sluice/cni.sock' };
  t.equal(planChain([{ name: '10-aws.conflist', text: JSON.stringify(reordered) }], { socketPath: '/var/run/sluice/cni.sock' }).action, 'keep', 'the same entry with its keys in another order: nothing to write');
});

t.test("the runtime's choice: sorted names, the first file that loads; sluice follows it", async (t) => {
  const files: ConfFile[] = [{ name: '20-b.conflist', text: AWS }, { name: '10-a.conf', text: ptpConf }, { name: 'README', text: 'x' }, { name: '05-x.txt', text: '{}' }];
  t.equal(runtimeConfig(files).file?.name, '10-a.conf');
  const plan = planChain(files);
  if (plan.action !== 'write') throw new Error(plan.action);
  t.same([plan.file, plan.target, plan.remove], ['10-a.conf', '10-a.conflist', '10-a.conf'], 'a single-plugin .conf becomes a .conflist of the same name');
  t.same(types(plan.text), ['ptp', 'sluice-cni']);
  const after = [{ name: '20-b.conflist', text: AWS }, { name: '10-a.conflist', text: plan.text }];
  t.equal(planChain(after).action, 'keep');
  // A new file that sorts first takes over: sluice must follow it.
  const takeover = planChain([...after, { name: '00-new.conflist', text: AWS }]);
  t.match(takeover, { action: 'write', file: '00-new.conflist', target: '00-new.conflist' });
});

t.test('unusable files: skipped by the runtime, refused here; nothing to chain into', async (t) => {
  t.match(planChain([]), { action: 'none', why: /install the primary CNI first/ });
  t.match(planChain([{ name: '10-aws.conflist', text: '{not json' }, { name: '99-z.conf', text: ptpConf }]), { action: 'refuse', why: /10-aws\.conflist: not valid JSON.*sorts before 99-z\.conf/ });
  t.match(planChain([{ name: '10-a.conflist', text: JSON.stringify({ cniVersion: '1.0.0', name: 'k8s', type: 'ptp' }) }]), { action: 'refuse', why: /without "plugins"/ });
  t.match(planChain([{ name: '10-a.conflist', text: JSON.stringify({ cniVersion: '1.0.0', name: 'k8s', plugins: [] }) }]), { action: 'refuse', why: /"plugins" is empty/ });
  t.match(planChain([{ name: '10-a.conflist', text: JSON.stringify({ cniVersion: '1.0.0', name: 'k8s', plugins: [{ type: 'sluice-cni' }] }) }]), { action: 'refuse', why: /only sluice in it/ }, 'sluice alone: no primary to chain after');
});

t.test('sluice in the wrong place or with other settings is rewritten in place', async (t) => {
  const list = JSON.parse(AWS);
  list.plugins.splice(0, 0, { type: 'sluice-cni' });
  const plan = planChain([{ name: '10-aws.conflist', text: JSON.stringify(list) }]);
  if (plan.action !== 'write') throw new Error(plan.action);
  t.same(types(plan.text), ['aws-cni', 'egress-cni', 'sluice-cni', 'portmap'], 'before the primary: moved after it');
  const other = JSON.parse(plan.text);
  other.plugins[1].socketPath = '/elsewhere.sock';
  t.match(planChain([{ name: '10-aws.conflist', text: JSON.stringify(other) }], { socketPath: '/var/run/sluice/cni.sock' }), { action: 'write' }, 'another socket path: rewritten');
});
