/**
 * "Which API writes has this agent enforced?": the agent's /status reports the resourceVersion up
 * to which every watched resource has delivered its changes and the resulting flows are on the
 * bridge. Against the lab's API server (real list/watch, bookmarks after each change): a write to
 * one resource advances what the other resources' informers have seen too (the bookmarks); the
 * reported version never passes a change whose flows are not applied yet; it appears only once
 * the first flows are on the bridge.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import { startLab } from './apiserver-helpers.js';

const log = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await sleep(10);
  }
}

t.test('the enforced resourceVersion follows writes to any resource, and only once their flows are applied', async (t) => {
  const lab = await startLab(t, { bookmarkOnChange: true });
  const dir = mkdtempSync(join(tmpdir(), 'enforce-gen-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, lab.kc.exportConfig());
  await lab.core.createNamespace({ body: { metadata: { name: 'x', labels: { ns: 'x' } } } });

  const enforcer = new Enforcer({ nodeName: 'node-1', kubeconfig, ovsRunDir: dir, bridge: 'br-int', log });
  t.teardown(() => enforcer.close());
  await enforcer.startWatch();
  await enforcer.waitSynced();
  // Applies block until the test lets them go, so the window between compile and commit is seen.
  let release: (() => void) | undefined;
  let applying = false;
  enforcer.bindFlows(async () => {
    applying = true;
    await new Promise<void>((r) => (release = r));
    applying = false;
  });
  t.equal(enforcer.status().resourceVersion, undefined, 'nothing reported before the first flows are on the bridge');
  enforcer.flowsConverged();
  const current = async () => BigInt((await lab.core.listNamespace()).metadata!.resourceVersion!);
  const reported = () => (enforcer.status().resourceVersion === undefined ? undefined : BigInt(enforcer.status().resourceVersion!));
  const start = await current();
  await until('the start-up state reported', () => (reported() ?? 0n) >= start);

  // A write that changes no policy input of this node's (a ConfigMap is not watched): the
  // bookmarks still carry every informer past it, and nothing needs applying.
  await lab.core.createNamespacedConfigMap({ namespace: 'x', body: { metadata: { name: 'c' }, data: {} } });
  const afterConfigMap = await current();
  await until('a write to an unwatched resource is reported as enforced', () => (reported() ?? 0n) >= afterConfigMap);
  t.notOk(applying, 'without applying anything');

  // A policy: reported only once its apply is done.
  await lab.net.createNamespacedNetworkPolicy({ namespace: 'x', body: { metadata: { name: 'deny' }, spec: { podSelector: {}, policyTypes: ['Ingress'] } } });
  const afterPolicy = await current();
  await until('the policy is being applied', () => applying);
  await sleep(50);
  const during = reported();
  t.ok(during !== undefined && during >= afterConfigMap && during < afterPolicy, `while its flows are being applied the earlier version stays reported, not the policy's (${during}: ${afterConfigMap} <= it < ${afterPolicy})`);
  release!();
  await until('reported once applied', () => (reported() ?? 0n) >= afterPolicy);
  t.pass(`reported ${reported()} >= ${afterPolicy} once the apply finished`);
});
