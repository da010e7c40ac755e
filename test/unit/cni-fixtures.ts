/**
 * CNI results used by the cni-* tests. PTP_040 and PTP_100 are verbatim outputs of the reference
 * `ptp` plugin (/usr/lib/cni/ptp with host-local IPAM) captured on this machine for cniVersion
 * 0.4.0 and 1.0.0. DUAL_110 is a dual-stack 1.1.0 result using the fields 1.1.0 added. libcniFile
 * is a runtime's cached ADD result (adoption of running Pods).
 */
export const PTP_040 = {
  cniVersion: '0.4.0',
  interfaces: [
    { name: 'veth17887458', mac: '52:1f:24:e3:4c:18' },
    { name: 'eth0', mac: 'fa:88:a5:85:5c:46', sandbox: '/var/run/netns/cn-fix' },
  ],
  ips: [{ version: '4', interface: 1, address: '10.99.7.2/24', gateway: '10.99.7.1' }],
  routes: [{ dst: '0.0.0.0/0' }],
  dns: { nameservers: ['10.96.0.10'], search: ['default.svc.cluster.local'] },
};

export const PTP_100 = {
  cniVersion: '1.0.0',
  interfaces: [
    { name: 'veth3de5e516', mac: '06:d6:b2:17:c7:08' },
    { name: 'eth1', mac: '12:57:f1:e8:5d:95', sandbox: '/var/run/netns/cn-fix' },
  ],
  ips: [{ interface: 1, address: '10.99.7.3/24', gateway: '10.99.7.1' }],
  routes: [{ dst: '0.0.0.0/0' }],
  dns: { nameservers: ['10.96.0.10'], search: ['default.svc.cluster.local'] },
};

export const DUAL_110 = {
  cniVersion: '1.1.0',
  interfaces: [
    { name: 'veth0a1b2c3d', mac: '0a:58:0a:f4:00:01', mtu: 9001 },
    { name: 'eth0', mac: '0a:58:0a:f4:00:05', mtu: 9001, sandbox: '/var/run/netns/cn-dual' },
  ],
  ips: [
    { interface: 1, address: '10.244.0.5/24', gateway: '10.244.0.1' },
    { interface: 1, address: 'fd00:10:244::5/64', gateway: 'fd00:10:244::1' },
  ],
  routes: [
    { dst: '0.0.0.0/0', gw: '10.244.0.1', mtu: 1500, priority: 10 },
    { dst: '::/0', table: 100, scope: 0 },
  ],
  dns: { nameservers: ['10.96.0.10'] },
  'x-vendor': { note: 'unknown fields pass through' },
};

/** A cache file as libcni (cachedInfo, CNICacheV1) writes it: config is base64 ([]byte). */
export function libcniFile(o: { id: string; ip: string; ip6?: string; ns?: string; name?: string; netns?: string; sandboxOnly?: boolean }): string {
  const conflist = { cniVersion: '1.0.0', name: 'aws-cni', plugins: [{ type: 'aws-cni' }] };
  return JSON.stringify({
    kind: 'cniCacheV1',
    containerId: o.id,
    config: Buffer.from(JSON.stringify(conflist)).toString('base64'),
    ifName: 'eth0',
    networkName: 'aws-cni',
    ...(o.sandboxOnly ? {} : { netns: o.netns ?? `/var/run/netns/cni-${o.id}` }),
    cniArgs: [['IgnoreUnknown', '1'], ...(o.ns ? [['K8S_POD_NAMESPACE', o.ns]] : []), ...(o.name ? [['K8S_POD_NAME', o.name]] : []), ['K8S_POD_INFRA_CONTAINER_ID', o.id]],
    capabilityArgs: { io: { kubernetes: { cri: {} } } },
    result: {
      cniVersion: '1.0.0',
      interfaces: [{ name: `eni${o.id}`, mac: '0a:00:00:00:00:01' }, { name: 'eth0', mac: '0a:00:00:00:00:02', sandbox: o.netns ?? `/var/run/netns/cni-${o.id}` }],
      ips: [{ address: `${o.ip}/32`, interface: 1 }, { address: `${o.ip6 ?? 'fd00::5'}/128`, interface: 1 }],
      routes: [{ dst: '0.0.0.0/0' }],
    },
  });
}
