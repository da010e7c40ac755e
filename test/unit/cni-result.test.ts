import t from 'tap';
import { SUPPORTED_VERSIONS } from '../../cni/protocol.js';
import { CniError } from '../../daemon/cni/errors.js';
import { convertResult, extraPodInterfaces, interfaceIPs, isCidr, normalizeResult, validateResult } from '../../daemon/cni/result.js';
import { DUAL_110, PTP_040, PTP_100 } from './cni-fixtures.js';

const OLD = ['0.3.0', '0.3.1', '0.4.0'];

/** What `result` must look like in `version`: only cniVersion and ips[].version differ. */
function expected(result: Record<string, unknown>, version: string): Record<string, unknown> {
  const copy = structuredClone(result) as Record<string, unknown> & { ips?: Record<string, unknown>[] | undefined };
  copy.cniVersion = version;
  copy.ips = copy.ips?.map(({ version: _v, ...ip }) =>
    OLD.includes(version) ? { version: String(ip.address).includes(':') ? '6' : '4', ...ip } : ip,
  );
  return copy;
}

for (const [label, source] of [
  ['ptp 0.4.0', PTP_040],
  ['ptp 1.0.0', PTP_100],
  ['dual-stack 1.1.0', DUAL_110],
] as const) {
  t.test(`${label} converts to every supported version`, async (t) => {
    for (const to of SUPPORTED_VERSIONS) {
      const out = convertResult(source, to);
      t.same(out, expected(source, to), `${label} -> ${to}`);
      t.equal(out.cniVersion, to);
      const ipsHaveVersion = (out.ips ?? []).every((ip) => 'version' in ip);
      t.equal(ipsHaveVersion, OLD.includes(to), `${label} -> ${to}: ips[].version present only for 0.x`);
    }
  });

  t.test(`${label} round-trips through every version pair unchanged`, async (t) => {
    for (const via of SUPPORTED_VERSIONS) {
      for (const to of SUPPORTED_VERSIONS) {
        const back = convertResult(convertResult(source, via), to);
        t.same(back, expected(source, to), `${label} -> ${via} -> ${to}`);
      }
    }
  });
}

t.test('0.x -> 1.x drops ips[].version and keeps the interface index and gateway', async (t) => {
  const out = convertResult(PTP_040, '1.1.0');
  t.same(out.ips, [{ interface: 1, address: '10.99.7.2/24', gateway: '10.99.7.1' }]);
  t.same(out.interfaces, PTP_040.interfaces);
  t.same(out.routes, PTP_040.routes);
  t.same(out.dns, PTP_040.dns);
});

t.test('1.x -> 0.x derives ips[].version from each address and keeps 1.1 fields and unknown keys', async (t) => {
  const out = convertResult(DUAL_110, '0.3.1');
  t.same(
    out.ips?.map((ip) => ip.version),
    ['4', '6'],
  );
  t.equal(out.interfaces?.[0]?.mtu, 9001);
  t.equal(out.routes?.[1]?.table, 100);
  t.same(out['x-vendor'], { note: 'unknown fields pass through' });
});

t.test('conversion never modifies its input', async (t) => {
  const input = structuredClone(PTP_040);
  convertResult(input, '1.0.0');
  normalizeResult(input);
  t.same(input, PTP_040);
});

t.test('normalizeResult gives the 1.x shape', async (t) => {
  const n = normalizeResult(PTP_040);
  t.equal(n.cniVersion, '1.1.0');
  t.notOk(n.ips?.some((ip) => 'version' in ip));
});

t.test('a result without cniVersion (libcni strips nothing, but hand-made ones do) is accepted', async (t) => {
  const { cniVersion: _v, ...bare } = PTP_100;
  t.equal(convertResult(bare, '0.4.0').ips?.[0]?.version, '4');
});

t.test('the AWS VPC CNI\'s prevResult (IPv6, egress-cni chained) is accepted and handed on unchanged', async (t) => {
  // aws-cni: host veth by name only, eth0's "mac" is the route table id, the dummy interface's the
  // VLAN id; egress-cni appends its veth pair and leaves ips alone (its IPv4 address is no Pod IP).
  const vpc = {
    cniVersion: '0.4.0',
    interfaces: [
      { name: 'eni8ea2c11fe35' },
      { name: 'eth0', sandbox: '/var/run/netns/cni-1', mac: '1' },
      { name: 'dummy8ea2c11fe35', mac: '0', sandbox: '0' },
      { name: 'veth1a2b3c4d', mac: '4e:9c:21:0a:bb:01' },
      { name: 'v4if0', mac: '9a:1f:33:c0:de:02', sandbox: '/var/run/netns/cni-1' },
    ],
    ips: [{ version: '6', address: '2600:1f14:abc:1::5/128', gateway: 'fe80::1', interface: 1 }],
    routes: [{ dst: '::/0', gw: 'fe80::1' }],
  };
  const n = normalizeResult(vpc);
  t.same(n.interfaces, vpc.interfaces, 'interfaces untouched, "mac" values too');
  t.same(interfaceIPs(n, 'eth0'), ['2600:1f14:abc:1::5'], 'the Pod IP is eth0\'s IPv6 address only');
  t.same(interfaceIPs(n, 'v4if0'), [], 'the egress interface has no Pod IP');
  t.same(convertResult(n, '0.4.0'), vpc, 'converted back, the same result');
});

t.test('invalid results are rejected with code 7 and the field named', async (t) => {
  const cases: [string, unknown, RegExp][] = [
    ['not an object', [], /prevResult must be a JSON object/],
    ['interfaces not a list', { interfaces: {} }, /prevResult\.interfaces must be a list/],
    ['interface without name', { interfaces: [{ mac: '0a:58:0a:f4:00:05' }] }, /prevResult\.interfaces\[0\]\.name must be a non-empty string/],
    ['mac not a string', { interfaces: [{ name: 'eth0', mac: 5 }] }, /prevResult\.interfaces\[0\]\.mac must be a string/],
    ['negative mtu', { interfaces: [{ name: 'eth0', mtu: -1 }] }, /prevResult\.interfaces\[0\]\.mtu must be a non-negative integer/],
    ['address without prefix', { ips: [{ address: '10.0.0.5' }] }, /prevResult\.ips\[0\]\.address must be an IP address in CIDR notation/],
    ['address with bad prefix', { ips: [{ address: '10.0.0.5/33' }] }, /prevResult\.ips\[0\]\.address/],
    ['bad gateway', { ips: [{ address: '10.0.0.5/24', gateway: '10.0.0' }] }, /prevResult\.ips\[0\]\.gateway must be an IP address/],
    ['gateway family mismatch', { ips: [{ address: '10.0.0.5/24', gateway: 'fd00::1' }] }, /gateway fd00::1 is not in the address family/],
    ['version mismatch', { ips: [{ version: '6', address: '10.0.0.5/24' }] }, /prevResult\.ips\[0\]\.version is "6" but 10\.0\.0\.5\/24 is IPv4/],
    ['bad version', { ips: [{ version: 4, address: '10.0.0.5/24' }] }, /prevResult\.ips\[0\]\.version must be "4" or "6"/],
    ['interface index out of range', { interfaces: [{ name: 'eth0' }], ips: [{ address: '10.0.0.5/24', interface: 1 }] }, /prevResult\.ips\[0\]\.interface is 1 but prevResult\.interfaces has 1 entry/],
    ['interface index not integer', { interfaces: [{ name: 'eth0' }], ips: [{ address: '10.0.0.5/24', interface: 0.5 }] }, /prevResult\.ips\[0\]\.interface must be a non-negative integer/],
    ['route without dst', { routes: [{ gw: '10.0.0.1' }] }, /prevResult\.routes\[0\]\.dst must be a destination in CIDR notation/],
    ['route bad gw', { routes: [{ dst: '0.0.0.0/0', gw: 'x' }] }, /prevResult\.routes\[0\]\.gw must be an IP address/],
    ['route bad table', { routes: [{ dst: '0.0.0.0/0', table: '300' }] }, /prevResult\.routes\[0\]\.table must be a non-negative integer/],
    ['dns not object', { dns: [] }, /prevResult\.dns must be an object/],
    ['dns nameservers not strings', { dns: { nameservers: [1] } }, /prevResult\.dns\.nameservers must be a list of strings/],
  ];
  for (const [label, raw, msg] of cases) {
    try {
      validateResult(raw);
      t.fail(`${label}: accepted`);
    } catch (err) {
      t.ok(err instanceof CniError, `${label}: CniError`);
      t.equal((err as CniError).code, 7, `${label}: code 7`);
      t.match((err as CniError).message, msg, label);
    }
  }
});

t.test('a prevResult claiming an unsupported version, or an unsupported target, is code 1', async (t) => {
  t.throws(() => convertResult({ ...PTP_040, cniVersion: '0.2.0' }, '1.0.0'), { code: 1, message: /prevResult\.cniVersion "0\.2\.0"/ });
  t.throws(() => convertResult(PTP_040, '2.0.0'), { code: 1 });
});

t.test('isCidr', async (t) => {
  for (const ok of ['10.0.0.0/8', '0.0.0.0/0', '10.1.2.3/32', '::/0', 'fd00::5/128']) t.ok(isCidr(ok), ok);
  for (const bad of ['10.0.0.0', '10.0.0.0/', '10.0.0.0/33', 'fd00::/129', 'x/8', '10.0.0.0/8/1', '10.0.0.0/-1', 7]) t.notOk(isCidr(bad), String(bad));
});

t.test('extraPodInterfaces: interfaces a chained plugin put in the Pod without an IP (the VPC CNI egress-cni\'s v4if0)', async (t) => {
  const ns = '/var/run/netns/cni-1';
  // The AWS VPC CNI's result on an IPv6 cluster, after egress-cni appended its host veth and v4if0.
  const eks = normalizeResult({
    cniVersion: '1.0.0',
    interfaces: [{ name: 'eni0123456789a' }, { name: 'eth0', sandbox: ns, mac: '1' }, { name: 'dummy0123456789a', mac: '0', sandbox: '0' }, { name: 'veth1a2b3c4d', mac: '6e:2d:11:22:33:44' }, { name: 'v4if0', mac: '5a:1b:22:33:44:55', sandbox: ns }],
    ips: [{ address: '2600:1f14::5/128', interface: 1 }],
  });
  t.same(extraPodInterfaces(eks, 'eth0', ns), ['v4if0']);
  t.same(interfaceIPs(eks, 'eth0'), ['2600:1f14::5'], 'the egress address is no Pod IP');
  t.same(extraPodInterfaces(eks, 'eth0', '/var/run/netns/other'), [], 'only interfaces in this Pod\'s namespace');
  t.same(extraPodInterfaces(normalizeResult(PTP_100), 'eth1', '/var/run/netns/cn-fix'), [], 'ptp: none');
  t.same(extraPodInterfaces(normalizeResult(DUAL_110), 'eth0', '/var/run/netns/cn-dual'), [], 'an interface with IPs is not extra');
  const secondWithIp = normalizeResult({ cniVersion: '1.0.0', interfaces: [{ name: 'eth0', sandbox: ns }, { name: 'net1', sandbox: ns }], ips: [{ address: '10.0.0.5/24', interface: 0 }, { address: '10.9.0.5/24', interface: 1 }] });
  t.same(extraPodInterfaces(secondWithIp, 'eth0', ns), [], 'an interface with its own IP is not an egress path without one');
  t.same(extraPodInterfaces(undefined, 'eth0', ns), []);
});
