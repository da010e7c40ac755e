import t from 'tap';
import {
  type ServicePortRule, chainHash, parseNatState, renderNatRestore, renderServiceRules, sepChain, svcChain,
} from '../../lab/net/service-nat.js';

const web: ServicePortRule = {
  namespace: 'x', name: 'web', portName: 'http', clusterIP: '10.96.0.10', port: 80, protocol: 'TCP',
  endpoints: [{ ip: '10.10.2.2', port: 8080 }, { ip: '10.10.1.2', port: 8080 }, { ip: '10.10.1.3', port: 8080 }],
};
const dns: ServicePortRule = { namespace: 'y', name: 'dns', clusterIP: '10.96.0.53', port: 53, protocol: 'UDP', endpoints: [{ ip: '10.10.1.4', port: 81 }] };

const web6: ServicePortRule = {
  namespace: 'x', name: 'web', portName: 'http', clusterIP: 'fd00:96::10', port: 80, protocol: 'TCP',
  endpoints: [{ ip: 'fd00:10:2::2', port: 8080 }, { ip: 'fd00:10:1::2', port: 8080 }],
};

t.test('IPv6: the same shape for ip6tables, /128 matches and bracketed DNAT targets', async (t) => {
  const { chains, rules } = renderServiceRules([web6]);
  const svc = svcChain(web6);
  t.equal(chains.length, 1 + 1 + 2);
  t.ok(rules.includes(`-A KUBE-SERVICES -d fd00:96::10/128 -p tcp -m comment --comment "x/web:http cluster IP" -m tcp --dport 80 -j ${svc}`));
  t.ok(rules.includes(`-A ${sepChain(web6, web6.endpoints[1]!)} -p tcp -m comment --comment "x/web:http" -m tcp -j DNAT --to-destination [fd00:10:1::2]:8080`));
  t.match(rules.filter((r) => r.startsWith(`-A ${svc} `))[0]!, /fd00:10:1::2:8080.*--probability 0\.5000000000/, 'endpoints ordered, probabilities as for IPv4');
  t.match(renderNatRestore([web6]), /^\*nat\n:KUBE-SERVICES - \[0:0\]/);
});

t.test('chain names: KUBE-SVC/KUBE-SEP + 16 base32 chars, stable, distinct per port/protocol/endpoint', async (t) => {
  t.match(svcChain(web), /^KUBE-SVC-[A-Z2-7]{16}$/);
  t.match(sepChain(web, web.endpoints[0]!), /^KUBE-SEP-[A-Z2-7]{16}$/);
  t.equal(svcChain(web), svcChain({ ...web, endpoints: [] }), 'the service chain does not depend on endpoints');
  t.not(svcChain(web), svcChain({ ...web, protocol: 'UDP' }));
  t.not(svcChain(web), svcChain({ ...web, portName: 'https' }));
  t.not(sepChain(web, web.endpoints[0]!), sepChain(web, web.endpoints[1]!));
  t.equal(chainHash('a'), chainHash('a'));
  t.equal(chainHash('a').length, 16);
});

t.test('kube-proxy shape: KUBE-SERVICES -> SVC -> SEP with probabilities 1/3, 1/2, then unconditional', async (t) => {
  const { chains, rules } = renderServiceRules([web]);
  const svc = svcChain(web);
  t.same(chains[0], 'KUBE-SERVICES');
  t.equal(chains.length, 1 + 1 + 3);
  t.ok(rules.includes(`-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "x/web:http cluster IP" -m tcp --dport 80 -j ${svc}`));
  const svcRules = rules.filter((r) => r.startsWith(`-A ${svc} `));
  t.equal(svcRules.length, 3);
  t.match(svcRules[0]!, /--probability 0\.3333333333 -j KUBE-SEP-/);
  t.match(svcRules[1]!, /--probability 0\.5000000000 -j KUBE-SEP-/);
  t.notMatch(svcRules[2]!, /statistic/);
  // Endpoints are ordered (numerically) so renders are stable whatever the input order.
  t.match(svcRules[0]!, /10\.10\.1\.2:8080/);
  t.match(svcRules[2]!, /10\.10\.2\.2:8080/);
  for (const e of web.endpoints) {
    t.ok(rules.includes(`-A ${sepChain(web, e)} -p tcp -m comment --comment "x/web:http" -m tcp -j DNAT --to-destination ${e.ip}:${e.port}`), `DNAT to ${e.ip}`);
  }
  t.same(renderServiceRules([{ ...web, endpoints: [...web.endpoints].reverse() }]), renderServiceRules([web]));
});

t.test('single endpoint: no statistic match; UDP uses -m udp; port number stands in for a missing port name', async (t) => {
  const { rules } = renderServiceRules([dns]);
  t.ok(rules.some((r) => r.includes('-p udp -m comment --comment "y/dns:53 cluster IP" -m udp --dport 53')));
  t.notOk(rules.some((r) => r.includes('statistic')));
  t.ok(rules.some((r) => r.endsWith('-j DNAT --to-destination 10.10.1.4:81')));
});

t.test('services without endpoints get no nat rules', async (t) => {
  const { chains, rules } = renderServiceRules([{ ...web, endpoints: [] }]);
  t.same(chains, ['KUBE-SERVICES']);
  t.same(rules, []);
});

t.test('restore input: declares chains, adds missing jumps only, deletes stale KUBE chains', async (t) => {
  const fresh = renderNatRestore([web, dns]);
  t.match(fresh, /^\*nat\n:KUBE-SERVICES - \[0:0\]\n/);
  t.match(fresh, /^-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES$/m);
  t.match(fresh, /^-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES$/m);
  t.match(fresh, /\nCOMMIT\n$/);
  const stale = 'KUBE-SVC-AAAAAAAAAAAAAAAA';
  const again = renderNatRestore([dns], { kubeChains: ['KUBE-SERVICES', svcChain(web), stale], preroutingJump: true, outputJump: true });
  t.notMatch(again, /-A (PREROUTING|OUTPUT)/);
  t.match(again, new RegExp(`^:${svcChain(web)} - \\[0:0\\]$`, 'm'), 'stale chains are declared (flushed) ...');
  t.match(again, new RegExp(`^-X ${svcChain(web)}$`, 'm'), '... and deleted');
  t.match(again, new RegExp(`^-X ${stale}$`, 'm'));
  t.notMatch(again, /^-X KUBE-SERVICES$/m);
  t.notMatch(again, /^-X KUBE-SVC-.*\n(?!-X|COMMIT)/m, 'deletions come after all rules');
});

t.test('parseNatState reads iptables-save output', async (t) => {
  const save = [
    '*nat', ':PREROUTING ACCEPT [0:0]', ':OUTPUT ACCEPT [0:0]', ':KUBE-SERVICES - [0:0]', ':KUBE-SEP-ABC - [0:0]', ':OTHER - [0:0]',
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES', 'COMMIT',
  ].join('\n');
  t.same(parseNatState(save), { kubeChains: ['KUBE-SERVICES', 'KUBE-SEP-ABC'], preroutingJump: true, outputJump: false });
});

t.test('bad input gets an error naming the service and the field', async (t) => {
  t.throws(() => renderServiceRules([{ ...web, clusterIP: '10.96.0' }]), /x\/web.*clusterIP "10\.96\.0" is not IPv4 or IPv6/);
  t.throws(() => renderServiceRules([{ ...web, clusterIP: 'fd00:96::10' }]), /endpoint 0 ip "10\.10\.2\.2" is not IPv6 like the clusterIP/);
  t.throws(() => renderServiceRules([web, web6]), /different tables/);
  t.throws(() => renderServiceRules([{ ...web, port: 0 }]), /port 0 is not 1-65535/);
  t.throws(() => renderServiceRules([{ ...web, protocol: 'ICMP' as 'TCP' }]), /protocol "ICMP"/);
  t.throws(() => renderServiceRules([{ ...web, endpoints: [{ ip: '10.10.1.2', port: 70000 }] }]), /endpoint 0 port 70000/);
  t.throws(() => renderServiceRules([web, { ...web, name: 'other' }]), /10\.96\.0\.10:80\/TCP is also used by x\/web/);
  t.throws(() => renderServiceRules([{ ...web, portName: 'bad name"' }]), /portName/);
});
