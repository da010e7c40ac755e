/**
 * An update that makes a policy invalid keeps its last valid version in force (policy engine);
 * the agent keeps that across a restart: the version is written to the state directory when it
 * changes and fed again, at start-up, just before the live object of the same uid.
 */
import t from 'tap';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { namespace, pod } from './policy-core-helpers.js';

const guard = (action: string, uid = 'uid-1'): KubeObject => ({
  apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'guard', uid, resourceVersion: action },
  spec: { priority: 1, appliedTo: [{ podSelector: { matchLabels: { pod: 'a' } } }], ingress: [{ action, from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'y' } } }] }] },
});

t.test('kept across a restart for the same object, not for a recreated one', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kept-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'kept-policies.json');
  const agent = () => {
    const e = new Enforcer({ nodeName: 'n1', ovsRunDir: '/nonexistent', bridge: 'br-int', log: pino({ level: 'silent' }), stateDir: dir });
    t.teardown(() => e.close());
    for (const o of [namespace('x'), namespace('y'), pod('x', 'a', { node: 'n1', ip: '10.0.1.1' }), pod('y', 'b', { node: 'n1', ip: '10.0.1.2' })]) e.onWatchEvent({ type: 'upsert', object: o });
    return e;
  };
  const verdict = (e: Enforcer) => e.engine.evaluate({ from: 'y/b', to: 'x/a', port: 80, protocol: 'TCP' }).verdict;

  const first = agent();
  first.onWatchEvent({ type: 'upsert', object: guard('Drop') });
  first.compileNow();
  t.equal(verdict(first), 'drop', 'the Drop is in force');
  t.notOk(existsSync(file) && JSON.parse(readFileSync(file, 'utf8')).length > 0, 'nothing kept while the object is valid');
  first.onWatchEvent({ type: 'upsert', object: guard('Dorp') });
  first.compileNow();
  t.equal(verdict(first), 'drop', 'an invalid update keeps the last valid version');
  t.same((JSON.parse(readFileSync(file, 'utf8')) as KubeObject[]).map((o) => o.metadata.resourceVersion), ['Drop'], 'which is written to the state directory');

  const restarted = agent();
  restarted.onWatchEvent({ type: 'upsert', object: guard('Dorp') });
  restarted.compileNow();
  t.equal(verdict(restarted), 'drop', 'after a restart, the same object (uid) still has its last valid version in force');
  t.match(restarted.engine.errors().find((e) => e.name === 'guard')?.message, /stays enforced/, 'and says so');

  const recreated = agent();
  recreated.onWatchEvent({ type: 'upsert', object: guard('Dorp', 'uid-2') });
  recreated.compileNow();
  t.equal(verdict(recreated), 'allow', 'an object recreated invalid (another uid) gets nothing from its predecessor');

  restarted.onWatchEvent({ type: 'upsert', object: guard('Allow') });
  restarted.compileNow();
  t.same(JSON.parse(readFileSync(file, 'utf8')), [], 'fixed: nothing kept any more');
});

t.test('an unreadable state file is reported and ignored', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kept-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'kept-policies.json'), '{not json');
  const warnings: string[] = [];
  const log = pino({ level: 'warn' }, { write: (s: string) => void warnings.push(s) });
  const e = new Enforcer({ nodeName: 'n1', ovsRunDir: '/nonexistent', bridge: 'br-int', log, stateDir: dir });
  t.teardown(() => e.close());
  t.ok(warnings.some((w) => w.includes('kept last valid versions could not be read')), 'a warning names it');
  e.onWatchEvent({ type: 'upsert', object: guard('Dorp') });
  t.equal(e.engine.rules().length, 0, 'and an invalid object yields nothing, as without the file');
});
