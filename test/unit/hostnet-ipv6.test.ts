/** The pure parts of IPv6 host networking: ip6tables binaries, per-family chains, the gateway's link-local, nodeIPv6. */
import t from 'tap';
import { parseConfig } from '../../daemon/config.js';
import { eui64LinkLocal } from '../../daemon/hostnet/index.js';
import { desiredChains, renderRestore } from '../../daemon/hostnet/iptables.js';
import { backendCommands, DEFAULT_IPTABLES, ip6Commands } from '../../daemon/hostnet/iptables-backend.js';
import { bufferToIp, familyOfText, ipToBuffer } from '../../daemon/hostnet/netlink.js';

t.test('ip6tables binaries of the same backend', async (t) => {
  t.same(ip6Commands(DEFAULT_IPTABLES), { iptables: 'ip6tables', save: 'ip6tables-save', restore: 'ip6tables-restore' });
  t.same(ip6Commands(backendCommands('nft')), { backend: 'nft', iptables: 'ip6tables-nft', save: 'ip6tables-nft-save', restore: 'ip6tables-nft-restore' });
  t.equal(ip6Commands({ iptables: '/usr/sbin/iptables-legacy', save: '/usr/sbin/iptables-legacy-save', restore: '/usr/sbin/iptables-legacy-restore' }).restore, '/usr/sbin/ip6tables-legacy-restore');
});

t.test('each family\'s chains take only that family\'s Service CIDRs', async (t) => {
  const opts = { gateway: 'antrea-gw0', serviceCIDRs: ['10.96.0.0/16', 'fd00:96::/112'] };
  const v4 = renderRestore(desiredChains(opts));
  const v6 = renderRestore(desiredChains({ ...opts, family: 6 }));
  t.match(v4, '-A ANTREA-MANGLE -i antrea-gw0 -d 10.96.0.0/16 ');
  t.match(v4, '-A ANTREA-MANGLE ! -d 10.96.0.0/16 ');
  t.notMatch(v4, /fd00/);
  t.match(v6, '-A ANTREA-MANGLE -i antrea-gw0 -d fd00:96::/112 ');
  t.match(v6, '-A ANTREA-MANGLE ! -d fd00:96::/112 ');
  t.notMatch(v6, /10\.96/);
  t.match(v6, '-A ANTREA-RAW -i antrea-gw0 -m mac --mac-source de:ad:be:ef:de:ad');
  const none = renderRestore(desiredChains({ ...opts, serviceCIDRs: ['10.96.0.0/16'], family: 6 }));
  t.match(none, '-A ANTREA-MANGLE -m comment --comment "Antrea: unmark post LB service traffic" -j MARK --and-mark', 'no IPv6 Service CIDR: the mark bit is only ever cleared');
  t.notMatch(none, /mark service traffic/);
});

t.test('the gateway\'s link-local address is the kernel\'s EUI-64 one', async (t) => {
  t.equal(eui64LinkLocal('12:47:af:78:79:fb'), 'fe80::1047:afff:fe78:79fb');
  t.equal(eui64LinkLocal('00:00:00:00:00:01'), 'fe80::200:ff:fe00:1');
});

t.test('netlink addresses of both families', async (t) => {
  t.same([...ipToBuffer('fd00:10::5')], [0xfd, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5]);
  t.equal(bufferToIp(ipToBuffer('FD00:10:0::5')), 'fd00:10::5');
  t.equal(bufferToIp(ipToBuffer('10.1.0.5')), '10.1.0.5');
  t.equal(familyOfText('fd00::/64'), 6);
  t.equal(familyOfText('default', 6), 6);
  t.throws(() => ipToBuffer('10.1.0'), /not an IPv4 or IPv6 address/);
});

t.test('nodeIPv6 setting', async (t) => {
  const cfg = (text: string) => parseConfig(`nodeName: n1\nserviceCIDRs: ["10.96.0.0/16", "fd00:96::/112"]\ndatapath: netdev\n${text}`, 'agent.yaml', {});
  t.equal(cfg('nodeIPv6: "fd00:77::11"').nodeIPv6, 'fd00:77::11');
  t.same(cfg('').serviceCIDRs, ['10.96.0.0/16', 'fd00:96::/112'], 'an IPv6 Service CIDR is accepted');
  t.throws(() => cfg('nodeIPv6: "10.0.0.1"'), /nodeIPv6.*not an IPv6 address/);
});
