// lab/cluster/podspec.ts: install/sluice.yaml's DaemonSet Pod translated into podman runs on a lab node,
// and the refusals for what the lab cannot honour.
import { join } from 'node:path';
import t from 'tap';
import { loadManifests } from '../../daemon/manifests.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { nodeHostPath, normalizeImage, planPodRun, PodSpecError, SERVICE_ACCOUNT_DIR, type NodeDirs, type PodInputs } from '../../lab/cluster/podspec.js';

const root = join(import.meta.dirname, '..', '..');
const dirs: NodeDirs = {
  lab: 'ds', node: 'node-2', netnsPath: '/run/netns/ds-node-2', hostIP: '192.168.77.12',
  cniConfDir: '/run/sluice-lab/ds/node-2/cni', cniBinDir: '/run/sluice-lab/ds/cni-bin', ovsRunDir: '/run/sluice-lab/ds/node-2/ovs',
  cniCacheDir: '/run/sluice-lab/ds/node-2/cni-cache',
  nodeRoot: '/run/sluice-lab/ds/node-2/root', podDir: '/run/sluice-lab/ds/node-2/pods/uid-1', apiHost: '127.0.0.1', apiPort: 6444,
};
const inputs: PodInputs = {
  configMaps: (ns, name) => (ns === 'sluice-system' && name === 'sluice-agent-config' ? { 'agent.yaml': 'bridge: br-int\n' } : undefined),
  serviceAccountToken: (ns, name) => `token-for-${ns}/${name}`,
  caCert: 'CA PEM',
};

async function dsPod(file = 'sluice.yaml', name = 'sluice-agent'): Promise<KubeObject> {
  const ds = (await loadManifests([join(root, 'install', file)])).find((o) => o.kind === 'DaemonSet' && o.metadata.name === name)!;
  const template = (ds.spec as any).template;
  return {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name: `${name}-abcde`, namespace: 'sluice-system', uid: '0123456789abcdef', labels: template.metadata.labels },
    spec: { ...structuredClone(template.spec), nodeName: 'node-2' },
  };
}
const flagValues = (args: string[], flag: string): string[] => args.flatMap((a, i) => (args[i - 1] === flag ? [a] : []));

t.test('install/sluice.yaml: the agent, OVS and install-cni containers on node-2', async (t) => {
  const plan = planPodRun(await dsPod(), dirs, inputs);
  t.same(plan.initContainers.map((c) => c.container), ['install-cni']);
  t.same(plan.containers.map((c) => c.container), ['sluice-agent', 'ovs']);
  const agent = plan.containers[0]!;
  t.equal(agent.name, 'ds-01234567-sluice-agent');
  t.equal(agent.image, 'docker.io/library/sluice:0.1.0');
  t.ok(agent.args.includes('--privileged'));
  t.same(flagValues(agent.args, '--network'), ['ns:/run/netns/ds-node-2']);
  t.same(flagValues(agent.args, '--pull'), ['never']);
  const env = flagValues(agent.args, '--env');
  t.ok(env.includes('NODE_NAME=node-2'), 'fieldRef spec.nodeName');
  t.ok(env.includes('KUBERNETES_SERVICE_HOST=127.0.0.1') && env.includes('KUBERNETES_SERVICE_PORT=6444'));
  const vols = flagValues(agent.args, '--volume');
  t.ok(vols.includes('/run/sluice-lab/ds/node-2/pods/uid-1/volumes/config:/etc/sluice:rw'), 'configMap volume');
  t.ok(vols.includes('/run/sluice-lab/ds/node-2/root/run/sluice:/var/run/sluice:rw'), 'the node\'s own sluice run dir');
  t.ok(vols.includes('/run/sluice-lab/ds/node-2/ovs:/var/run/openvswitch:rw'), 'the node\'s OVS run dir');
  t.ok(vols.includes('/run/netns:/var/run/netns:rw,rslave'), 'netns with HostToContainer propagation');
  t.ok(vols.includes('/proc:/host/proc:ro'));
  t.ok(vols.includes('/run/xtables.lock:/run/xtables.lock:rw'));
  t.ok(vols.includes('/run/sluice-lab/ds/cni-bin:/host/opt/cni/bin:ro'));
  t.ok(vols.includes('/run/sluice-lab/ds/node-2/cni:/host/etc/cni/net.d:rw'));
  t.ok(vols.includes('/run/sluice-lab/ds/node-2/cni-cache:/host/var/lib/cni:ro'), "the runtime's CNI result cache: what running Pods are adopted from");
  t.ok(vols.includes(`/run/sluice-lab/ds/node-2/pods/uid-1/serviceaccount:${SERVICE_ACCOUNT_DIR}:ro`));
  // command → entrypoint, then the image; no args.
  t.same(agent.args.slice(-2), [JSON.stringify(['sluice-agent', '--config', '/etc/sluice/agent.yaml']), 'docker.io/library/sluice:0.1.0']);
  t.same(plan.files.find((f) => f.path.endsWith('/config/agent.yaml'))?.content, 'bridge: br-int\n');
  t.same(plan.files.find((f) => f.path.endsWith('/serviceaccount/token'))?.content, 'token-for-sluice-system/sluice-agent');
  t.same(plan.files.find((f) => f.path.endsWith('/serviceaccount/namespace'))?.content, 'sluice-system');
  t.ok(plan.dirs.includes('/run/sluice-lab/ds/node-2/root/var/lib/sluice/ovsdb'), 'DirectoryOrCreate');
  t.ok(plan.touch.includes('/run/xtables.lock'), 'FileOrCreate');
  t.ok(plan.dirsIfMissing.includes('/lib/modules'), 'no type: made a directory if missing, as containerd does');
  t.same(plan.mustExist, []);
  const ovs = plan.containers[1]!;
  t.ok(flagValues(ovs.args, '--volume').includes('/run/sluice-lab/ds/node-2/root/var/lib/sluice/ovsdb:/etc/openvswitch:rw'));
  t.ok(flagValues(ovs.args, '--volume').includes('/lib/modules:/lib/modules:ro'));
});

t.test('install/uninstall.yaml: no ServiceAccount token when automount is off', async (t) => {
  const plan = planPodRun(await dsPod('uninstall.yaml', 'sluice-uninstall'), dirs, inputs);
  t.same(plan.initContainers.map((c) => c.container), ['uninstall-cni']);
  t.notOk(plan.files.some((f) => f.path.includes('serviceaccount')));
  t.notOk(plan.containers[0]!.args.some((a) => a.includes(SERVICE_ACCOUNT_DIR)));
  t.equal(plan.containers[0]!.args.includes('--privileged'), false, 'not privileged unless asked');
});

t.test('refusals name the field', async (t) => {
  const base = await dsPod();
  const variant = (edit: (spec: any) => void): KubeObject => {
    const p = structuredClone(base);
    edit(p.spec);
    return p;
  };
  const refused = (pod: KubeObject, re: RegExp, what: string) => t.throws(() => planPodRun(pod, dirs, inputs), { name: 'PodSpecError', message: re }, what);
  refused(variant((s) => (s.hostNetwork = false)), /spec\.hostNetwork must be true/, 'non-hostNetwork');
  refused(variant((s) => s.volumes.push({ name: 'x', secret: { secretName: 's' } })), /spec\.volumes\[\d+\] \(x\): volume type secret/, 'secret volume');
  refused(variant((s) => (s.containers[0].ports[0].hostPort = 19377)), /spec\.containers\[0\]\.ports\[0\]\.hostPort 19377/, 'hostPort');
  refused(variant((s) => (s.containers[0].livenessProbe = { exec: { command: ['true'] } })), /spec\.containers\[0\]\.livenessProbe: only httpGet/, 'exec probe');
  refused(variant((s) => (s.containers[0].env = [{ name: 'X', valueFrom: { secretKeyRef: { name: 's', key: 'k' } } }])), /env\[0\] \(X\)\.valueFrom/, 'secretKeyRef');
  refused(variant((s) => (s.containers[0].env = [{ name: 'X', valueFrom: { fieldRef: { fieldPath: 'metadata.labels' } } }])), /fieldPath "metadata\.labels"/, 'unknown fieldRef');
  refused(variant((s) => (s.volumes.find((v: any) => v.name === 'proc').hostPath.path = '/srv/data')), /spec\.volumes\[\d+\] \(proc\)\.hostPath\.path: hostPath "\/srv\/data" has no place/, 'unmapped hostPath');
  refused(variant((s) => (s.containers[0].startupProbe = { httpGet: { port: 9376 } })), /spec\.containers\[0\]\.startupProbe is not supported/, 'startupProbe');
  refused(variant((s) => (s.containers[0].readinessProbe.httpGet.scheme = 'GRPC')), /readinessProbe\.httpGet\.scheme GRPC: not HTTP or HTTPS/, 'a scheme that is neither HTTP nor HTTPS');
  refused(variant((s) => (s.containers[1].lifecycle = { preStop: {} })), /spec\.containers\[1\]\.lifecycle is not supported/, 'unknown container field');
  refused(variant((s) => (s.containers[0].resources.limits = { memory: '1Gi' })), /resources\.limits are not enforced/, 'limits');
  refused(variant((s) => (s.containers[0].volumeMounts[0].name = 'nope')), /volumeMounts\[0\]\.name "nope" is not one of spec\.volumes/, 'mount of no volume');
  t.throws(() => planPodRun(base, dirs, { ...inputs, configMaps: () => undefined }), { name: 'PodInputMissing', message: /ConfigMap sluice-system\/sluice-agent-config not found/ }, 'a missing ConfigMap is waited for, not refused');
});

t.test('host paths and images', async (t) => {
  t.equal(nodeHostPath(dirs, '/var/run/openvswitch/db.sock', 'f'), '/run/sluice-lab/ds/node-2/ovs/db.sock');
  t.equal(nodeHostPath(dirs, '/run/sluice', 'f'), '/run/sluice-lab/ds/node-2/root/run/sluice');
  t.equal(nodeHostPath(dirs, '/var/log/antrea/networkpolicy', 'f'), '/run/sluice-lab/ds/node-2/root/var/log/antrea/networkpolicy');
  t.equal(nodeHostPath(dirs, '/etc/cni/net.d/', 'f'), '/run/sluice-lab/ds/node-2/cni');
  t.throws(() => nodeHostPath(dirs, 'relative', 'f'), PodSpecError);
  t.throws(() => nodeHostPath(dirs, '/', 'f'), /has no place/);
  t.equal(normalizeImage('sluice:0.1.0'), 'docker.io/library/sluice:0.1.0');
  t.equal(normalizeImage('sluice'), 'docker.io/library/sluice:latest');
  t.equal(normalizeImage('localhost/sluice:0.1.0'), 'localhost/sluice:0.1.0');
  t.equal(normalizeImage('quay.io/a/b:1'), 'quay.io/a/b:1');
  t.equal(normalizeImage('a/b'), 'docker.io/a/b:latest');
});
