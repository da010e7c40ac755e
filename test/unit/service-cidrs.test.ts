/**
 * The node's Service ranges (daemon/node/service-cidrs.ts): the cluster's ServiceCIDR objects
 * where it serves them, else the configuration's, else a refusal that says how to set them; and
 * the Services whose ClusterIP is outside them. The lab's API server serves ServiceCIDR as a 1.33
 * kube-apiserver does (the "kubernetes" one from its range); the agent's informers list it, trimmed.
 */
import t from 'tap';
import { chooseServiceCidrs, clusterIPsOutside, serviceCidrsOf } from '../../daemon/node/service-cidrs.js';
import { parseConfig } from '../../daemon/config.js';
import { trimObject } from '../../daemon/enforcement/watch/trim.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import { startLab } from './apiserver-helpers.js';

const sc = (name: string, cidrs: unknown): KubeObject => ({ apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name }, spec: { cidrs } });

t.test('the ranges of ServiceCIDR objects: valid ones, canonical, once', async (t) => {
  t.same(serviceCidrsOf([sc('kubernetes', ['10.96.0.0/16', 'FD00:96::/112']), sc('extra', ['10.97.0.0/16', '10.96.0.0/16', 'nonsense']), sc('empty', null)]), ['10.96.0.0/16', '10.97.0.0/16', 'fd00:96::/112']);
});

t.test('served ranges win; the configuration is the fallback; with neither, a refusal that says what to set', async (t) => {
  t.same(chooseServiceCidrs([sc('kubernetes', ['10.96.0.0/16'])], ['10.100.0.0/16']), { cidrs: ['10.96.0.0/16'], source: 'ServiceCIDR kubernetes' });
  t.same(chooseServiceCidrs(undefined, ['10.100.0.0/16']), { cidrs: ['10.100.0.0/16'], source: 'configuration (the cluster does not serve ServiceCIDR)' });
  t.match(chooseServiceCidrs([], ['10.100.0.0/16']), { cidrs: ['10.100.0.0/16'], source: /serves ServiceCIDR but defines no range/ });
  t.match(chooseServiceCidrs(undefined, []), { error: /does not serve networking.k8s.io\/v1 ServiceCIDR.*set serviceCIDRs in the agent's configuration/ });
  t.match(chooseServiceCidrs([], []), { error: /serves ServiceCIDR but defines no range/ });
});

t.test('Services outside the ranges: each ClusterIP of each family checked', async (t) => {
  const services = [
    { namespace: 'x', name: 'in', clusterIPs: ['10.96.0.10', 'fd00:96::a'] },
    { namespace: 'x', name: 'out', clusterIPs: ['10.200.0.1'] },
    { namespace: 'y', name: 'half', clusterIPs: ['10.96.0.11', 'fd00:99::1'] },
    { namespace: 'y', name: 'headless', clusterIPs: [] },
  ];
  t.same(clusterIPsOutside(services, ['10.96.0.0/16', 'fd00:96::/112']), [{ service: 'x/out', ip: '10.200.0.1' }, { service: 'y/half', ip: 'fd00:99::1' }]);
  t.same(clusterIPsOutside(services, []).length, 5, 'no range: every ClusterIP is outside');
});

t.test('configuration: serviceCIDRs may be left out; an empty list is refused', async (t) => {
  t.same(parseConfig('', 'a', { NODE_NAME: 'n' }, () => ({ loaded: true, loadable: true })).serviceCIDRs, []);
  t.throws(() => parseConfig('serviceCIDRs: []', 'a', { NODE_NAME: 'n' }), /serviceCIDRs: must be a non-empty list of CIDRs \(leave it out to use the cluster's ServiceCIDR objects\)/);
});

t.test('the lab API server serves the default ServiceCIDR from its range; the trim keeps its cidrs', async (t) => {
  const lab = await startLab(t, { serviceCIDR: '10.96.0.0/16,fd00:96::/112' });
  const list = (await lab.custom.listClusterCustomObject({ group: 'networking.k8s.io', version: 'v1', plural: 'servicecidrs' })) as { items: KubeObject[] };
  t.equal(list.items.length, 1);
  const obj = { ...list.items[0]!, apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR' };
  t.same(obj.metadata.name, 'kubernetes');
  t.same(trimObject(obj).spec, { cidrs: ['10.96.0.0/16', 'fd00:96::/112'] });
  t.same(chooseServiceCidrs([trimObject(obj)], []), { cidrs: ['10.96.0.0/16', 'fd00:96::/112'], source: 'ServiceCIDR kubernetes' });
  // The agent's informers: start-up waits for this one list, then has the objects.
  const dir = mkdtempSync(join(tmpdir(), 'servicecidrs-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, lab.kc.exportConfig());
  const e = new Enforcer({ nodeName: 'node-1', kubeconfig, ovsRunDir: dir, bridge: 'br-int', log: pino({ level: 'silent' }) });
  t.teardown(() => e.close());
  await e.startWatch({ retryMs: 100, maxRetryMs: 300 });
  t.same((await e.serviceCidrObjects())?.map((o) => o.spec), [{ cidrs: ['10.96.0.0/16', 'fd00:96::/112'] }], 'listed through the informer, trimmed');
});
