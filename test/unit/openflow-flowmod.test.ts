/**
 * Native flow programming, the pure half: sluice's flow text -> OFPT_FLOW_MOD bytes. The oracle is
 * OVS itself: `ovs-ofctl ofp-parse` decodes the encoded messages and must print exactly what
 * `ovs-ofctl -O OpenFlow15 parse-flows` prints for the same text (OVS's own parse and encoding),
 * over the agent's whole flow set (./flowmod-corpus.ts) plus hand-written flows for the syntax the
 * corpus does not reach. A few messages are also checked byte by byte, and syntax outside sluice's
 * subset must fail naming the token.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import {
  decodeAggregateStatsReply,
  decodeFlowDescReply,
  encodeAggregateStatsRequest,
  encodeBundleAdd,
  encodeBundleControl,
  encodeFlowAdd,
  encodeFlowDeleteByCookie,
  encodeFlowDescRequest,
  errorName,
  OFPBCT,
} from '../../daemon/ovs/openflow/flowmod.js';
import { FlowSyntaxError, parseFlowText } from '../../daemon/ovs/openflow/flowtext.js';
import { corpusFlowTexts } from './flowmod-corpus.js';

const haveOfctl = (() => {
  try {
    execFileSync('ovs-ofctl', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

/** Syntax the agent's corpus does not reach, still inside the subset. */
const EXTRA = [
  'table=0,priority=5,cookie=0x51ce000000000001,in_port=7,dl_dst=01:00:00:00:00:00/01:00:00:00:00:00 actions=output:5',
  'table=0,cookie=0x1,ip,nw_src=10.0.0.0/255.255.0.0 actions=controller(max_len=128,userdata=01.02)',
  'table=1,cookie=0x2,icmp,icmp_code=3,reg3=5 actions=ct(commit,zone=7),ct(table=4),resubmit(3,4),resubmit(,5),set_field:0x1/0x1->pkt_mark,controller()',
  'table=1,ipv6,ipv6_src=fd00::1/ffff:ffff::,pkt_mark=0x5/0xf actions=ct(commit,exec(set_field:0x1/0x3->ct_label,load:0x3->NXM_NX_CT_MARK[4..5])),goto_table:2',
  'table=2,priority=1,arp,arp_tpa=10.0.0.1,arp_tha=00:00:00:00:00:01,dl_type=0x0806 actions=move:NXM_NX_REG0[0..15]->NXM_NX_REG1[16..31],move:NXM_NX_CT_LABEL[64..95]->NXM_NX_REG2[0..31],IN_PORT',
  'table=3,priority=65535,udp6,ipv6_dst=::1,tp_src=0x0/0xff00,ct_zone=9,ct_mark=3 actions=dec_ttl,output:NXM_NX_REG3[0..15]',
];

t.test('every flow the agent emits decodes exactly as OVS parses its text', { skip: haveOfctl ? false : 'ovs-ofctl not installed' }, async (t) => {
  const texts = [...corpusFlowTexts(), ...EXTRA];
  const dir = mkdtempSync(join(tmpdir(), 'ofn-flowmod-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'flows.txt'), `${texts.join('\n')}\n`);
  writeFileSync(join(dir, 'flows.bin'), Buffer.concat(texts.map((text, i) => encodeFlowAdd(i + 1, parseFlowText(text)))));
  const strip = (out: string) => out.split('\n').filter((l) => l.startsWith('OFPT_')).map((l) => l.replace(/ \(xid=0x[0-9a-f]+\)/, ''));
  const ours = strip(execFileSync('ovs-ofctl', ['ofp-parse', join(dir, 'flows.bin')]).toString());
  const theirs = strip(execFileSync('ovs-ofctl', ['-O', 'OpenFlow15', 'parse-flows', join(dir, 'flows.txt')]).toString());
  t.equal(theirs.length, texts.length, 'OVS parsed every flow');
  t.equal(ours.length, texts.length, 'OVS decoded every message');
  const bad = texts.flatMap((text, i) => (ours[i] === theirs[i] ? [] : [{ text, ours: ours[i], theirs: theirs[i] }]));
  t.same(bad, [], 'no flow decodes differently');
  t.notOk(ours.some((l) => l.includes('decode error')), 'no decode error');

  // The corpus must keep reaching every kind of field and action (else the comparison proves less).
  const parsed = corpusFlowTexts().map(parseFlowText);
  const fields = new Set(parsed.flatMap((f) => f.match.map((m) => m.field.name)));
  const kinds = new Set(parsed.flatMap((f) => f.actions.flatMap((a) => (a.type === 'ct' ? [a.type, ...a.exec.map((x) => `ct/${x.type}`)] : [a.type]))));
  for (const f of ['in_port', 'eth_dst', 'eth_src', 'eth_type', 'ip_proto', 'ip_dscp', 'ipv4_src', 'ipv4_dst', 'ipv6_src', 'ipv6_dst', 'tcp_dst', 'udp_src', 'udp_dst', 'sctp_dst', 'icmpv4_type', 'icmpv4_code', 'icmpv6_type', 'icmpv6_code', 'arp_op', 'arp_spa', 'arp_sha', 'reg0', 'reg5', 'reg6', 'reg9', 'conj_id', 'ct_state', 'ct_mark', 'ct_label']) {
    t.ok(fields.has(f), `the corpus matches ${f}`);
  }
  for (const k of ['output', 'output_reg', 'dec_ttl', 'set_field', 'move', 'ct', 'ct/set_field', 'ct/move', 'conjunction', 'resubmit', 'controller']) t.ok(kinds.has(k), `the corpus uses ${k}`);
  t.ok(parsed.some((f) => f.gotoTable !== undefined) && parsed.some((f) => f.actions.length === 0 && f.gotoTable === undefined), 'goto_table and drop');
});

t.test('flow-mod bytes, checked by hand', async (t) => {
  const drop = encodeFlowAdd(7, parseFlowText('table=0,priority=0,cookie=0x51ce00b2f86bf89d actions=drop'));
  t.equal(
    drop.toString('hex'),
    [
      '060e0038', '00000007', // OF1.5 FLOW_MOD, 56 bytes, xid 7
      '51ce00b2f86bf89d', '0000000000000000', // cookie, cookie mask
      '00', '00', '0000', '0000', '0000', // table 0, ADD, idle, hard, priority 0
      'ffffffff', 'ffffffff', 'ffffffff', '0000', '0000', // buffer, out_port, out_group, flags, importance
      '00010004', '00000000', // empty OXM match, padded
    ].join(''),
  );
  const gotoArp = encodeFlowAdd(1, parseFlowText('table=0,priority=200,cookie=0x51ce00ec42033840,arp actions=goto_table:1'));
  t.equal(gotoArp.subarray(48).toString('hex'), '0001000a' + '80000a020806' + '000000000000' + '00010008' + '01000000', 'eth_type OXM, then goto_table:1');
  const conj = encodeFlowAdd(1, parseFlowText('table=6,priority=9,ip actions=conjunction(258,2/3)'));
  t.equal(conj.subarray(64).toString('hex'), '00040018' + '00000000' + 'ffff0010' + '00002320' + '0022' + '01' + '03' + '00000102', 'apply_actions with NXAST_CONJUNCTION (clause 1 of 3)');
  const ctl = encodeFlowAdd(1, parseFlowText('table=1 actions=controller(userdata=02.00,meter_id=258)'));
  t.equal(
    ctl.subarray(56).toString('hex'),
    '00040028' + '00000000' + 'ffff0020' + '00002320' + '0025' + '000000000000' + '00030006' + '0200' + '0000' + '00050008' + '00000102',
    'NXAST_CONTROLLER2 with userdata and meter_id properties',
  );
  t.equal(drop.readUInt16BE(2), drop.length, 'header length');
});

t.test('bundle, delete and statistics messages decode as OVS reads them', { skip: haveOfctl ? false : 'ovs-ofctl not installed' }, async (t) => {
  const show = (msg: Buffer) => execFileSync('ovs-ofctl', ['ofp-print', msg.toString('hex')]).toString().trim();
  t.match(show(encodeFlowDeleteByCookie(3, 0x51ce00b2f86bf89dn)), /^OFPT_FLOW_MOD \(OF1\.5\) \(xid=0x3\): DEL table:255 priority=0 cookie:0x51ce00b2f86bf89d\/0xffffffffffffffff actions=drop$/);
  t.match(show(encodeBundleControl(4, 9, OFPBCT.OPEN_REQUEST)), /OFPT_BUNDLE_CONTROL \(OF1\.5\) \(xid=0x4\):\s+bundle_id=0x9 type=OPEN_REQUEST flags=atomic ordered/);
  t.match(show(encodeBundleControl(5, 9, OFPBCT.COMMIT_REQUEST)), /type=COMMIT_REQUEST flags=atomic ordered/);
  const add = encodeBundleAdd(9, encodeFlowAdd(6, parseFlowText('table=2,priority=3,ip actions=drop')));
  t.equal(add.readUInt32BE(4), 6, 'the add message carries the inner xid');
  t.match(show(add), /OFPT_BUNDLE_ADD_MESSAGE \(OF1\.5\) \(xid=0x6\):\s+bundle_id=0x9 flags=atomic ordered\s+OFPT_FLOW_MOD \(OF1\.5\) \(xid=0x6\): ADD table:2 priority=3,ip actions=drop/);
  const filter = { cookie: 0x51ce000000000000n, cookieMask: 0xffff000000000000n };
  // ofp-print does not show a statistics request's cookie filter: checked in place.
  const desc = encodeFlowDescRequest(7, filter);
  t.equal(show(desc), 'OFPST_FLOW request (OF1.5) (xid=0x7):', 'all tables, any port');
  t.equal(desc.subarray(32, 48).toString('hex'), '51ce000000000000ffff000000000000', 'cookie and cookie mask');
  t.equal(show(encodeAggregateStatsRequest(8, { ...filter, table: 9 })), 'OFPST_AGGREGATE request (OF1.5) (xid=0x8): table=9');
});

t.test('statistics replies', async (t) => {
  // OFPMP_FLOW_DESC reply: one flow in table 9 (empty match), packet and byte counts in OXS.
  const flow = Buffer.from(
    '0050' + '0000' + '09' + '00' + '00c8' + '0000' + '0000' + '0000' + '0000' + '51ce02aabbccddee' + '00010004' + '00000000' +
      '0000' + '001c' + '80020808' + '0000000000000007' + '80020a08' + '00000000000001f4' + '00000000' + // ofp_stats (28 bytes, padded)
      '00010008' + '0a000000', // goto_table:10
    'hex',
  );
  const reply = Buffer.concat([Buffer.from('0613006800000005' + '0001' + '0000' + '00000000', 'hex'), flow]);
  reply.writeUInt16BE(reply.length, 2);
  flow.writeUInt16BE(flow.length, 0);
  const reply2 = Buffer.concat([reply.subarray(0, 16), flow]);
  reply2.writeUInt16BE(reply2.length, 2);
  t.same(decodeFlowDescReply(reply2), [{ table: 9, priority: 200, cookie: 0x51ce02aabbccddeen, packets: 7n, bytes: 500n }]);
  const agg = Buffer.from('0613003000000006' + '0002' + '0000' + '00000000' + '0000' + '0020' + '80020608' + '0000000000000003' + '80020604' + '0000002a' + '80020a08' + '0000000000000064', 'hex');
  agg.writeUInt16BE(agg.length, 2);
  t.throws(() => decodeAggregateStatsReply(agg), /overruns|flow count/, 'malformed OXS lengths are refused');
  const good = Buffer.from('0613002800000006' + '0002' + '0000' + '00000000' + '0000' + '0018' + '80020604' + '0000002a' + '80020808' + '0000000000000003', 'hex');
  t.same(decodeAggregateStatsReply(good), { flowCount: 42, packets: 3n, bytes: 0n });
  t.equal(errorName(2, 10), 'OFPET_BAD_ACTION/OFPBAC_MATCH_INCONSISTENT (type 2, code 10)');
  t.equal(errorName(0xffff, 3), 'OFPET_EXPERIMENTER (type 65535, code 3)');
});

t.test('syntax outside the subset fails naming the token, never mis-encodes', async (t) => {
  const cases: [string, RegExp][] = [
    ['table=0,ip actions=meter:256,goto_table:1', /unsupported action "meter:256"/],
    ['table=0,tun_id=5 actions=drop', /unsupported field "tun_id"/],
    ['table=0,ip,tp_dst=80 actions=drop', /tp_dst needs tcp, udp or sctp/],
    ['table=0,ip actions=goto_table:3,drop', /"drop" must be the only action|must be the last action/],
    ['table=0,ip actions=output:1,goto_table:2,dec_ttl', /"goto_table:2" must be the last action/],
    ['table=5,ip actions=goto_table:3', /does not go forward/],
    ['table=0,ct_state=+new+bogus actions=drop', /unknown flag "bogus"/],
    ['table=0,ip actions=ct(commit,zone=1', /unbalanced/],
    ['table=0,ip actions=ct(commit,nat(src=1.1.1.1))', /unsupported ct\(\) argument "nat\(src=1.1.1.1\)"/],
    ['table=0,ip actions=learn(table=1)', /unsupported action "learn\(table=1\)"/],
    ['table=0,ip actions=controller(reason=no_match)', /unsupported controller\(\) argument "reason=no_match"/],
    ['table=0,ip,nw_src=10.0.0.300 actions=drop', /not an IPv4 address/],
    ['table=0,ip,nw_src=10.0.0.1,nw_src=10.0.0.2 actions=drop', /already matched/],
    ['table=0,ip actions=set_field:0x100000000->reg0', /does not fit in 32 bits/],
    ['table=0,ip actions=move:NXM_NX_REG0[0..7]->NXM_NX_REG1[0..15]', /8 bits, destination 16/],
    ['table=0,ip,nw_tos=3 actions=drop', /ECN bits/],
    ['table=0,ip,cookie=0x1/0xff actions=drop', /no cookie mask/],
    ['table=0,ip', /has no actions=/],
    ['table=0,ip actions=', /no actions/],
    ['table=0,ipx actions=drop', /unsupported match keyword "ipx"/],
    // Numbers are read as JavaScript numbers up to 15 characters, as BigInts beyond: both limits hold.
    ['table=0,reg0=0x100000000 actions=drop', /reg0: 4294967296 does not fit in 32 bits/],
    ['table=0,reg0=0x000000000100000000 actions=drop', /reg0: 4294967296 does not fit in 32 bits/],
    ['table=0,in_port=0x1fffffffffff actions=drop', /does not fit in 32 bits/],
    ['table=0,priority=65536 actions=drop', /priority: 65536 is above 65535/],
    ['table=0x00000000000000100,priority=1 actions=drop', /table: 0x00000000000000100 is above 254/],
    ['table=0,reg0=-1 actions=drop', /"-1" is not a number/],
    ['table=0,ip,nw_src=10.0.0.01 actions=drop', /not an IPv4 address/],
    ['table=0,ip,nw_src=10.0.0 actions=drop', /not an IPv4 address/],
  ];
  for (const [text, re] of cases) {
    t.throws(() => parseFlowText(text), re, text);
    try {
      parseFlowText(text);
    } catch (err) {
      t.ok(err instanceof FlowSyntaxError, `${text}: a FlowSyntaxError`);
    }
  }
  t.throws(() => parseFlowText('table=0,ip actions=meter:256'), { message: /in flow "table=0,ip actions=meter:256"/ }, 'the error names the flow');
  // The widest values and leading zeros still read exactly (each path: number and BigInt).
  const wide = parseFlowText('table=0x000000000000000fe,priority=0xffff,reg0=0xffffffff,ct_label=0xffffffffffffffffffffffffffffffff,ip,nw_src=255.255.255.255 actions=drop');
  t.equal(wide.table, 254);
  t.equal(wide.priority, 0xffff);
  t.same(wide.match.map((m) => [m.field.name, m.value.toString('hex')]), [
    ['eth_type', '0800'],
    ['reg0', 'ffffffff'],
    ['ct_label', 'ff'.repeat(16)],
    ['ipv4_src', 'ffffffff'],
  ]);
});
