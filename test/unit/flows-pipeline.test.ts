import t from 'tap';
import { bundleText, diffFlows, isEmptyDiff, parseSluiceCookies } from '../../daemon/flows/diff.js';
import { type Flow, flowText, normalizeCookie, resolveTableNames } from '../../daemon/flows/flow.js';
import { computeFlows, type PipelineInput, PipelineInputError, PipelineOwners, podFlows, podOwner } from '../../daemon/flows/pipeline.js';
import { FlowStore } from '../../daemon/flows/store.js';
import { POLICY_HOOK_TABLES, TABLES, tableId } from '../../daemon/flows/tables.js';

const GWMAC = '0a:00:00:00:00:01';
const p1 = { containerId: 'c1', ofport: 11, mac: '2a:00:00:00:00:11', ips: ['10.1.0.11'] };
const p3 = { containerId: 'c3', ofport: 13, mac: '2a:00:00:00:00:13', ips: ['10.1.0.13'] };
const input = (over: Partial<PipelineInput> = {}): PipelineInput => ({
  gatewayOfport: 32769,
  gatewayMac: GWMAC,
  nodeIP: '192.168.77.11',
  serviceCIDRs: ['10.96.0.0/12'],
  pods: [p1, p3],
  ...over,
});
const inTable = (flows: Flow[], table: string) => flows.filter((f) => f.table === table);
const one = (flows: Flow[], pred: (f: Flow) => boolean, what: string): Flow => {
  const found = flows.filter(pred);
  if (found.length !== 1) throw new Error(`expected exactly one flow for ${what}, got ${found.length}`);
  return found[0]!;
};

t.test('deterministic and independent of Pod order', async (t) => {
  const a = computeFlows(input());
  const b = computeFlows(input({ pods: [p3, p1] }));
  t.same(a.map(flowText), b.map(flowText));
  t.equal(new Set(a.map((f) => f.cookie)).size, a.length, 'cookies are unique');
  for (const f of a) t.match(f.cookie, /^0x51ce0[01][0-9a-f]{10}$/, `cookie of ${f.table} ${f.match}`);
  t.ok(a.filter((f) => f.owner === 'c1').every((f) => f.cookie.startsWith('0x51ce01')), 'Pod flows carry category 1');
  t.ok(a.filter((f) => !f.owner).every((f) => f.cookie.startsWith('0x51ce00')), 'base flows carry category 0');
});

t.test('every goto_table jumps forward and every table has a miss flow', async (t) => {
  const flows = computeFlows(input());
  for (const f of flows) {
    for (const m of flowText(f).matchAll(/(?:goto_table:|table=)(\d+)(?=[,)]|$)/g)) {
      if (m[0].startsWith('table=') && Number(m[1]) === tableId(f.table)) continue; // its own table= prefix
      t.ok(Number(m[1]) > tableId(f.table), `${f.table} -> table ${m[1]}`);
    }
  }
  for (const table of TABLES.filter((x) => x !== 'Output')) {
    t.ok(inTable(flows, table).some((f) => f.priority === 0 && f.match === ''), `${table} has a priority-0 miss flow`);
  }
});

t.test('ARP responder answers every request with the virtual MAC out IN_PORT', async (t) => {
  const flows = computeFlows(input());
  const f = one(flows, (f) => f.table === 'ARPResponder' && f.match.startsWith('arp'), 'ARP responder');
  t.equal(f.match, 'arp,arp_op=1');
  t.match(f.actions, /set_field:aa:bb:cc:dd:ee:ff->eth_src/);
  t.match(f.actions, /set_field:aa:bb:cc:dd:ee:ff->arp_sha/);
  t.match(f.actions, /set_field:2->arp_op/);
  t.match(f.actions, /IN_PORT$/);
  t.ok(flows.some((f) => f.table === 'ARPSpoofGuard' && f.match === 'arp,in_port=32769'), 'the host may ARP for anything');
  one(flows, (f) => f.table === 'ARPSpoofGuard' && f.match === `arp,in_port=11,dl_src=${p1.mac},arp_spa=10.1.0.11,arp_sha=${p1.mac}`, 'p1 ARP guard');
});

t.test('spoof guard: a Pod port passes only with its own MAC and IP', async (t) => {
  const flows = computeFlows(input({ pods: [{ ...p1, ips: ['10.1.0.11', '10.1.0.12'] }] }));
  const guards = inTable(flows, 'SpoofGuard').filter((f) => f.owner === 'c1');
  t.same(guards.map((f) => f.match).sort(), [`ip,in_port=11,dl_src=${p1.mac},nw_src=10.1.0.11`, `ip,in_port=11,dl_src=${p1.mac},nw_src=10.1.0.12`]);
  t.ok(inTable(flows, 'SpoofGuard').some((f) => f.priority === 0 && f.actions === 'drop'), 'anything else is dropped');
  t.ok(inTable(flows, 'Classifier').some((f) => f.priority === 0 && f.actions === 'drop'), 'unknown ports and non-IP are dropped');
});

t.test('spoof guard: a Pod frame addressed to the re-entrance MAC or to a group address is not routed', async (t) => {
  const flows = computeFlows(input());
  const guard = inTable(flows, 'SpoofGuard');
  const pass = one(guard, (f) => f.owner === 'c1', 'p1 guard');
  for (const dst of ['de:ad:be:ef:de:ad', '01:00:00:00:00:00/01:00:00:00:00:00']) {
    const drop = one(guard, (f) => f.match === `ip,reg0=0x2/0xf,dl_dst=${dst}`, `drop to ${dst}`);
    t.equal(drop.actions, 'drop', `a Pod's frame to ${dst} is dropped`);
    t.ok(drop.priority > pass.priority, `before the Pod's own-address check lets it through (${dst})`);
    t.notOk(drop.owner, 'one flow for every Pod port (reg0 says it came from a Pod)');
  }
  t.notOk(guard.some((f) => f.actions === 'drop' && f.priority > 0 && f.match.includes('aa:bb:cc:dd:ee:ff')), 'frames to the virtual MAC (what the ARP responder hands out) are routed');
  const gw = one(guard, (f) => f.match === 'ip,in_port=32769', 'gateway pass');
  t.notMatch(gw.match, /dl_dst/, 'the gateway\'s frames are not checked (reg0 marks them as from the gateway, not a Pod)');
});

t.test('conntrack zone 65520 and invalid drop', async (t) => {
  const flows = computeFlows(input());
  t.ok(inTable(flows, 'ConntrackZone').filter((f) => f.match.startsWith('ip')).every((f) => f.actions.includes('ct(table=ConntrackState,zone=65520)')), 'every IP packet is tracked in zone 65520');
  one(flows, (f) => f.table === 'ConntrackState' && f.match === 'ct_state=+inv+trk,ip' && f.actions === 'drop', 'inv drop');
  t.match(resolveTableNames('ct(table=ConntrackState,zone=65520)'), `ct(table=${tableId('ConntrackState')},zone=65520)`);
});

t.test('L3 forwarding: local Pods by destination IP, everything else and Services to the gateway', async (t) => {
  const flows = computeFlows(input());
  const toP3 = one(flows, (f) => f.table === 'L3Forwarding' && f.match === 'ip,nw_dst=10.1.0.13', 'to p3');
  t.match(toP3.actions, `set_field:aa:bb:cc:dd:ee:ff->eth_src,set_field:${p3.mac}->eth_dst,set_field:13->reg1`);
  const dflt = one(flows, (f) => f.table === 'L3Forwarding' && f.match === 'ip', 'default');
  t.match(dflt.actions, `set_field:${GWMAC}->eth_dst,set_field:32769->reg1`);
  t.notMatch(dflt.actions, /eth_src/, 'the default route does not touch the source MAC');
  const svc = one(flows, (f) => f.table === 'L3Forwarding' && f.match === 'ip,nw_dst=10.96.0.0/12', 'service');
  t.notMatch(svc.actions, /eth_src/, 'Service traffic leaves untouched apart from the gateway MAC');
  t.ok(svc.priority < toP3.priority && svc.priority > dflt.priority);
  const rpl = one(flows, (f) => f.table === 'L3Forwarding' && f.match.startsWith('ct_state=+rpl+trk') && f.match.includes(',ip,'), 'reply to gateway');
  t.match(rpl.match, 'ct_mark=0x20/0x20');
  t.match(rpl.match, 'reg0=0x2/0xf');
  t.ok(rpl.priority > toP3.priority, 'replies of gateway connections beat local delivery (un-DNAT in the host)');
  const ttl = one(flows, (f) => f.table === 'L3DecTTL' && f.priority > 0 && f.match.startsWith('ip,'), 'dec_ttl');
  t.equal(ttl.match, 'ip,reg0=0x202/0xf0f', 'only Pod -> local Pod loses the hop the host used to make');
});

t.test('re-entrance: from the gateway back to the gateway', async (t) => {
  const flows = computeFlows(input());
  const out = one(flows, (f) => f.table === 'Output' && f.priority === 210 && f.match.startsWith('ip,'), 're-entrance output');
  t.equal(out.match, 'ip,reg0=0x101/0xf0f');
  t.equal(out.actions, 'set_field:de:ad:be:ef:de:ad->eth_src,IN_PORT');
  const skip = one(flows, (f) => f.table === 'ConntrackCommit' && f.match === 'ip,reg0=0x101/0xf0f', 'commit skip');
  t.notMatch(skip.actions, /ct\(/);
  for (const c of inTable(flows, 'ConntrackCommit').filter((f) => f.actions.includes('ct(commit'))) {
    t.ok(c.priority < skip.priority, 'the skip beats every commit');
  }
  const mark = one(flows, (f) => f.table === 'ConntrackCommit' && f.actions.includes('ct_mark') && f.match.includes(',ip,'), 'commit with mark');
  t.match(mark.match, 'reg0=0x1/0xf');
  t.match(mark.actions, 'ct(commit,zone=65520,exec(set_field:0x20/0x20->ct_mark,move:NXM_NX_REG5[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG6[]->NXM_NX_CT_LABEL[32..63]))');
  for (const c of inTable(flows, 'ConntrackCommit').filter((f) => f.actions.includes('ct(commit'))) {
    t.match(c.actions, 'move:NXM_NX_REG5[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG6[]->NXM_NX_CT_LABEL[32..63]', 'every commit records the deciding rules (per-rule statistics)');
  }
});

t.test('host-originated packets are marked and skip ingress hooks', async (t) => {
  const flows = computeFlows(input());
  const host = one(flows, (f) => f.table === 'Classifier' && f.priority === 210 && f.match.startsWith('ip,'), 'host classifier');
  t.equal(host.match, 'ip,in_port=32769,nw_src=192.168.77.11');
  t.match(host.actions, 'set_field:0x11/0x1f->reg0');
  one(flows, (f) => f.table === 'IngressSecurityClassifier' && f.match === 'reg0=0x10/0x10', 'exemption');
  t.notOk(computeFlows(input({ nodeIP: undefined })).some((f) => f.match.includes('nw_src=192.168.77.11')), 'no node IP, no host flow');
});

t.test('policy hook tables exist and pass everything to the next table; the Metric tables drop what a rule dropped', async (t) => {
  const flows = computeFlows(input());
  for (const table of POLICY_HOOK_TABLES) {
    const fs = inTable(flows, table).filter((f) => f.priority === 0);
    t.equal(fs.length, 1, `${table} has one miss flow`);
    t.equal(fs[0]!.actions, `goto_table:${TABLES[tableId(table) + 1]}`);
    const others = inTable(flows, table).filter((f) => f.priority !== 0);
    if (table.endsWith('Metric')) t.same(others.map((f) => `${f.priority} ${f.match} -> ${f.actions}`), ['100 reg0=0x1000/0x1000 -> drop'], `${table}: a Drop/Reject rule's packet is dropped even without its counter flow`);
    else t.same(others, [], `${table}: nothing else`);
  }
});

t.test('bad input names the field', async (t) => {
  t.throws(() => computeFlows(input({ gatewayMac: 'zz' })), new PipelineInputError('gatewayMac: "zz" is not a lower-case MAC address'));
  t.throws(() => computeFlows(input({ serviceCIDRs: ['10.96.0.1/12'] })), /serviceCIDRs\[0\].*host bits/);
  t.throws(() => computeFlows(input({ serviceCIDRs: ['10.96.0.0/33'] })), /serviceCIDRs\[0\].*not an IPv4 or IPv6 CIDR/);
  t.throws(() => computeFlows(input({ pods: [p1, { ...p3, ofport: 11 }] })), /pods\[1\] \(container c3\)\.ofport 11 is already used by container c1/);
  t.throws(() => computeFlows(input({ pods: [p1, { ...p3, ips: ['10.1.0.11'] }] })), /IP 10.1.0.11 is already used by container c1/);
  t.throws(() => computeFlows(input({ pods: [{ ...p1, ips: ['fd00::g'] }] })), /ips: "fd00::g" is not an IPv4 or IPv6 address/);
  t.throws(() => computeFlows(input({ pods: [{ ...p1, ips: ['fe80::1'] }] })), /ips: "fe80::1" is a link-local address, not a Pod address/);
  t.throws(() => computeFlows(input({ pods: [{ ...p1, ips: ['::ffff:10.1.0.11'] }] })), /is not an IPv4 or IPv6 address/);
  t.throws(() => computeFlows(input({ pods: [p1, { ...p3, ips: ['fd00:1:0::11'] }, { ...p1, containerId: 'c4', ofport: 14, ips: ['FD00:1::11'] }] })), /pods\[2\].*IP FD00:1::11 is already used by container c3/, 'one IPv6 address however it is written');
  t.throws(() => computeFlows(input({ nodeIPv6: '10.0.0.1' })), /nodeIPv6: "10.0.0.1" is not an IPv6 address/);
  t.throws(() => computeFlows(input({ nodeIP: 'fd00::1' })), /nodeIP: "fd00::1" is not an IPv4 address/);
  t.throws(() => computeFlows(input({ serviceCIDRs: ['fd00:96::1/112'] })), /serviceCIDRs\[0\].*host bits/);
  t.throws(() => computeFlows(input({ pods: [{ ...p1, ofport: 32769 }] })), /already used by the gateway/);
  t.throws(() => computeFlows(input({ nodeIP: '1.2.3' })), /nodeIP/);
});

t.test('diff: adding and removing a Pod touches only its flows', async (t) => {
  const before = computeFlows(input({ pods: [p1] }));
  const after = computeFlows(input());
  const added = diffFlows(after, before.map((f) => f.cookie));
  t.same(added.add.map((f) => f.cookie).sort(), podFlows(p3).map((f) => f.cookie).sort());
  t.same(added.remove, []);
  t.equal(added.unchanged, before.length);
  const removed = diffFlows(before, after.map((f) => f.cookie));
  t.same(removed.add, []);
  t.same(removed.remove, podFlows(p3).map((f) => f.cookie).sort());
  t.ok(isEmptyDiff(diffFlows(after, after.map((f) => f.cookie))), 'same set: nothing to do');
  const svc = diffFlows(computeFlows(input({ serviceCIDRs: ['10.100.0.0/16'] })), after.map((f) => f.cookie));
  t.equal(svc.add.length, 2, 'a Service CIDR change replaces its two flows');
  t.equal(svc.remove.length, 2);
});

t.test('bundle text: deletions first, by exact cookie; parse of dump output', async (t) => {
  const flows = computeFlows(input());
  const text = bundleText({ add: flows.slice(0, 2), remove: ['0x51ce000000000001'], unchanged: 0 });
  const lines = text.trim().split('\n');
  t.equal(lines[0], 'delete cookie=0x51ce000000000001/-1');
  t.match(lines[1], /^add table=0,priority=\d+,cookie=0x51ce00[0-9a-f]{10},/);
  t.equal(bundleText({ add: [], remove: [], unchanged: 3 }), '');
  const dump = [
    'OFPST_FLOW reply (OF1.5) (xid=0x2):',
    ' cookie=0x51ce01abcdef0123, duration=1.2s, table=3, n_packets=0, priority=200,ip actions=drop',
    ' cookie=0x0, duration=1.2s, table=0, priority=0 actions=drop',
    ' cookie=0x1234, table=0, priority=1 actions=drop',
  ].join('\n');
  t.same(parseSluiceCookies(dump), ['0x51ce01abcdef0123'], 'foreign cookies are ignored');
});

const cookies = (flows: readonly Flow[]) => flows.map((f) => f.cookie).sort();

t.test('PipelineOwners: the store holds computeFlows of the input; only what changed is recomputed', async (t) => {
  const store = new FlowStore();
  const owners = new PipelineOwners();
  owners.update(store, input());
  t.same(cookies(store.flows()), cookies(computeFlows(input())));
  t.same(store.ownerNames().sort(), ['base', podOwner('c1'), podOwner('c3')]);
  store.take();
  owners.update(store, input());
  t.same(store.take(), { add: [], remove: [] }, 'an equal input (another object): nothing changes');
  const p2 = { containerId: 'c2', ofport: 12, mac: '2a:00:00:00:00:12', ips: ['10.1.0.12'] };
  owners.update(store, input({ pods: [p1, p2, p3] }));
  const added = store.take();
  t.same(cookies(added.add), cookies(podFlows(p2)), 'a new Pod: exactly its flows are added');
  t.same(added.remove, []);
  owners.update(store, input({ pods: [p3, { ...p2, ofport: 14 }] }));
  const moved = store.take();
  t.same(moved.remove.sort(), [...cookies(podFlows(p1)), ...cookies(podFlows(p2)).filter((c) => !podFlows({ ...p2, ofport: 14 }).some((f) => f.cookie === c))].sort(), 'a Pod gone and a Pod moved: only their flows go');
  t.same(cookies(store.flows()), cookies(computeFlows(input({ pods: [p3, { ...p2, ofport: 14 }] }))));
});

t.test('PipelineOwners: bad input throws as computeFlows does and changes nothing', async (t) => {
  const store = new FlowStore();
  const owners = new PipelineOwners();
  owners.update(store, input());
  store.take();
  t.throws(() => owners.update(store, input({ gatewayMac: 'zz' })), new PipelineInputError('gatewayMac: "zz" is not a lower-case MAC address'));
  t.throws(() => owners.update(store, input({ pods: [p1, p3, { ...p3, containerId: 'c4', ofport: 14 }] })), /IP 10\.1\.0\.13 is already used by container c3/);
  t.throws(() => owners.update(store, input({ pods: [p1, p3, { ...p3, containerId: 'c4', ips: ['10.1.0.14'] }] })), /ofport 13 is already used by container c3/);
  t.throws(() => owners.update(store, input({ pods: [p1, { ...p3, ofport: 32769 }] })), /ofport 32769 is already used by the gateway/);
  t.same(store.take(), { add: [], remove: [] }, 'no half-applied input');
  // A Pod may take the address a departing one frees in the same update.
  owners.update(store, input({ pods: [p1, { ...p3, containerId: 'c5' }] }));
  t.same(cookies(store.flows()), cookies(computeFlows(input({ pods: [p1, { ...p3, containerId: 'c5' }] }))));
});

t.test('normalizeCookie: the form ovs-ofctl may print and the form sluice writes compare equal', async (t) => {
  t.equal(normalizeCookie('0x51ce0212345678ab'), '0x51ce0212345678ab');
  t.equal(normalizeCookie('0x51CE0212345678AB'), '0x51ce0212345678ab');
  t.equal(normalizeCookie('0x0051ce0212345678ab'), '0x51ce0212345678ab');
  t.equal(normalizeCookie('0x0'), '0x0');
});
