/**
 * The CNI runner and the eks-sim plugin against the CNI contract: plugin order, prevResult
 * chaining, the environment, the cached result for CHECK/DEL, error objects, rollback, idempotent DEL.
 * A recording plugin chained after ptp writes down exactly what it was given.
 */
import t from 'tap';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import {
  type Conflist, CniPluginError, cacheFile, cniAdd, cniBinDir, cniCheck, cniDel, createLab, createPodSandbox,
  deletePodSandbox, destroyLab, ipamDir, missingLabPrerequisites, netnsPath, nodeNetns, podNetns, run, runIn, stateDir,
} from '../../lab/net/index.js';

const LAB = 'la3';
const NODE = 'node-1';
const missing = missingLabPrerequisites();

interface Record {
  tag: string;
  command: string;
  env: { [k: string]: string };
  stdin: { [k: string]: unknown } & { prevResult?: { recordedBy?: string[]; ips?: { address: string }[] } };
  netnsIno: number;
}

const RECORDER = (execPath: string) => `#!${execPath}
// Test plugin: records its stdin/env, passes prevResult on with its tag appended, or fails on request.
const fs = require('fs');
const conf = JSON.parse(fs.readFileSync(0, 'utf8'));
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('CNI_')));
fs.appendFileSync(conf.recordFile, JSON.stringify({ tag: conf.tag, command: process.env.CNI_COMMAND, env, stdin: conf, netnsIno: fs.statSync('/proc/self/ns/net').ino }) + '\\n');
if (process.env.CNI_COMMAND === 'ADD') {
  if (conf.failWith) { process.stdout.write(JSON.stringify({ cniVersion: conf.cniVersion, ...conf.failWith })); process.exit(1); }
  const prev = conf.prevResult || { cniVersion: conf.cniVersion };
  process.stdout.write(JSON.stringify({ ...prev, recordedBy: [...(prev.recordedBy || []), conf.tag] }));
}
`;

const recordFile = () => `${stateDir(LAB)}/records.jsonl`;
const readRecords = (): Record[] =>
  existsSync(recordFile()) ? readFileSync(recordFile(), 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record) : [];
const clearRecords = () => writeFileSync(recordFile(), '');
const hostLocalIps = () => readdirSync(`${ipamDir(LAB, NODE)}/labtest`).filter((f) => /^\d+\.\d+\.\d+\.\d+$/.test(f));
const nodeVeths = async () =>
  (JSON.parse((await runIn(nodeNetns(LAB, NODE), 'ip', ['-j', 'link', 'show', 'type', 'veth'])).stdout) as { ifname: string }[])
    .map((l) => l.ifname)
    .filter((n) => n !== 'uplink');

function conflist(recorders: { tag: string; failWith?: object }[], name = 'labtest'): Conflist {
  const primary = JSON.parse(readFileSync(`${stateDir(LAB)}/${NODE}/cni/10-lab.conflist`, 'utf8')) as Conflist;
  return {
    cniVersion: '1.0.0',
    name,
    plugins: [primary.plugins[0]!, ...recorders.map((r) => ({ type: 'recorder', recordFile: recordFile(), ...r }))],
  };
}

if (missing.length) {
  t.plan(0, `lab tests need ${missing.join(', ')}`);
} else {
  t.before(async () => {
    await destroyLab(LAB);
    await createLab({ name: LAB, nodes: 1, primary: 'ptp', ovs: false });
    writeFileSync(`${cniBinDir(LAB)}/recorder`, RECORDER(process.execPath), { mode: 0o755 });
  });
  t.teardown(() => destroyLab(LAB).then(() => undefined));

  t.test('ADD runs plugins in order, each with the previous result as prevResult, in the node namespace', async (t) => {
    clearRecords();
    const sandbox = await createPodSandbox({ lab: LAB, node: NODE, namespace: 'x', name: 'rec', conflist: conflist([{ tag: 'r1' }, { tag: 'r2' }]) });
    const recs = readRecords();
    t.same(recs.map((r) => `${r.tag}:${r.command}`), ['r1:ADD', 'r2:ADD']);
    const [r1, r2] = recs as [Record, Record];
    t.equal(r1.stdin.name, 'labtest', 'name from the list');
    t.equal(r1.stdin.cniVersion, '1.0.0', 'cniVersion from the list');
    t.equal(r1.stdin.tag, 'r1', "the plugin's own config is kept");
    t.match(r1.stdin.prevResult?.ips?.[0]?.address, /^10\.10\.1\.\d+\/24$/, "r1 got ptp's result");
    t.notOk(r1.stdin.prevResult?.recordedBy, "ptp's result has no recorder tag");
    t.same(r2.stdin.prevResult?.recordedBy, ['r1'], "r2 got r1's result, not ptp's");
    const { recordedBy, ...rest } = r2.stdin.prevResult!;
    void recordedBy;
    t.same(rest, r1.stdin.prevResult, 'r1 passed the rest of the result through');
    t.same(sandbox.result?.recordedBy, ['r1', 'r2'], 'the final result is the last plugin\'s');
    t.same(sandbox.ips, [r1.stdin.prevResult!.ips![0]!.address.split('/')[0]]);
    t.same(r1.env, {
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: sandbox.containerId,
      CNI_NETNS: netnsPath(podNetns(LAB, 'x', 'rec')),
      CNI_IFNAME: 'eth0',
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=x;K8S_POD_NAME=rec;K8S_POD_INFRA_CONTAINER_ID=${sandbox.containerId}`,
      CNI_PATH: cniBinDir(LAB),
    });
    t.equal(r1.netnsIno, statSync(netnsPath(nodeNetns(LAB, NODE))).ino, 'plugins run inside the node namespace');
    const cached = JSON.parse(readFileSync(cacheFile({ lab: LAB, node: NODE, containerId: sandbox.containerId, netns: sandbox.netns, podNamespace: 'x', podName: 'rec' }, 'labtest'), 'utf8'));
    t.same(cached.result, sandbox.result, 'final result cached under the state dir');
    t.match(cached, { kind: 'cniCacheV1', containerId: sandbox.containerId, ifName: 'eth0', networkName: 'labtest', netns: netnsPath(sandbox.netns) }, "in libcni's format");
    t.same(JSON.parse(Buffer.from(cached.config, 'base64').toString('utf8')).name, 'labtest', 'config as base64 bytes, as libcni marshals a []byte');
    t.same(cached.cniArgs, [['IgnoreUnknown', '1'], ['K8S_POD_NAMESPACE', 'x'], ['K8S_POD_NAME', 'rec'], ['K8S_POD_INFRA_CONTAINER_ID', sandbox.containerId]]);
    t.equal(sandbox.txChecksumOffByLab, false, 'a chained conflist leaves TX checksum offload to the chained plugin');
    t.match((await runIn(sandbox.netns, 'ethtool', ['-k', 'eth0'])).stdout, /^tx-checksumming: on/m);

    clearRecords();
    const inv = { lab: LAB, node: NODE, containerId: sandbox.containerId, netns: sandbox.netns, podNamespace: 'x', podName: 'rec' };
    await cniCheck(inv);
    t.same(readRecords().map((r) => `${r.tag}:${r.command}`), ['r1:CHECK', 'r2:CHECK'], 'CHECK in order');
    for (const r of readRecords()) t.same(r.stdin.prevResult, sandbox.result, `${r.tag} CHECK got the cached result`);

    clearRecords();
    await deletePodSandbox({ lab: LAB, namespace: 'x', name: 'rec' });
    t.same(readRecords().map((r) => `${r.tag}:${r.command}`), ['r2:DEL', 'r1:DEL'], 'DEL in reverse order');
    for (const r of readRecords()) t.same(r.stdin.prevResult, sandbox.result, `${r.tag} DEL got the cached result`);
    t.same(hostLocalIps(), [], 'ptp DEL ran too: address released');
    t.same(await nodeVeths(), [], 'host veth gone');
    t.notOk(existsSync(netnsPath(sandbox.netns)), 'netns gone');
    t.same(readdirSync(`${stateDir(LAB)}/${NODE}/cni-cache/results`), [], 'cache entry removed');
    clearRecords();
    await deletePodSandbox({ lab: LAB, namespace: 'x', name: 'rec' });
    t.same(readRecords(), [], 'a second delete runs nothing and succeeds');
  });

  t.test('a failing plugin surfaces its CNI error object and the sandbox is rolled back', async (t) => {
    clearRecords();
    const failing = conflist([{ tag: 'ok' }, { tag: 'bad', failWith: { code: 142, msg: 'boom', details: 'the reason' } }]);
    const err = await createPodSandbox({ lab: LAB, node: NODE, namespace: 'x', name: 'fail', conflist: failing }).catch((e: unknown) => e);
    t.ok(err instanceof CniPluginError, 'typed error');
    const e = err as CniPluginError;
    t.same({ plugin: e.plugin, command: e.command, code: e.code, msg: e.msg, details: e.details }, { plugin: 'recorder', command: 'ADD', code: 142, msg: 'boom', details: 'the reason' });
    t.match(e.message, /recorder.*\[142\] boom \(the reason\)/);
    t.same(readRecords().map((r) => `${r.tag}:${r.command}`), ['ok:ADD', 'bad:ADD', 'bad:DEL', 'ok:DEL'], 'the runtime cleaned up with DEL');
    t.same(hostLocalIps(), [], 'no address left allocated');
    t.same(await nodeVeths(), [], 'no veth left');
    t.notOk(existsSync(netnsPath(podNetns(LAB, 'x', 'fail'))), 'no namespace left');
  });

  t.test('eks-sim follows the CNI contract', async (t) => {
    const eks = (cniVersion: string, name = 'ekstest'): Conflist => ({
      cniVersion, name,
      plugins: [{ type: 'eks-sim', ipam: { type: 'host-local', ranges: [[{ subnet: '10.10.1.0/24', rangeStart: '10.10.1.100', rangeEnd: '10.10.1.110' }]], dataDir: ipamDir(LAB, NODE) } }],
    });
    const version = await runIn(nodeNetns(LAB, NODE), `${cniBinDir(LAB)}/eks-sim`, [], { env: { ...process.env, CNI_COMMAND: 'VERSION' } });
    t.ok((JSON.parse(version.stdout) as { supportedVersions: string[] }).supportedVersions.includes('1.0.0'), 'VERSION lists 1.0.0');

    const ns = podNetns(LAB, 'x', 'eks');
    await run('ip', ['netns', 'add', ns]);
    const inv = { lab: LAB, node: NODE, containerId: 'c0ffee' + '0'.repeat(58), netns: ns, podNamespace: 'x', podName: 'eks' };
    const bad = await cniAdd(inv, eks('9.9.9')).catch((e: unknown) => e);
    t.ok(bad instanceof CniPluginError && bad.code === 1, `unsupported cniVersion is error code 1 (${(bad as Error).message})`);

    const res = await cniAdd(inv, eks('0.4.0'));
    t.equal(res.cniVersion, '0.4.0', 'result in the config\'s version');
    t.match(res.ips?.[0], { version: '4', gateway: '169.254.1.1', interface: 1 });
    t.match(res.ips?.[0]?.address, /^10\.10\.1\.(10\d|110)\/32$/);
    await t.resolves(cniCheck(inv), 'CHECK passes on a fresh Pod');
    await runIn(ns, 'ip', ['route', 'del', 'default']);
    const broken = await cniCheck(inv).catch((e: unknown) => e);
    t.ok(broken instanceof CniPluginError, 'CHECK notices a missing default route');
    t.match((broken as CniPluginError).details, /default route via 169\.254\.1\.1 missing/);
    const cachedList = eks('0.4.0');
    await cniDel(inv, cachedList);
    await t.resolves(cniDel(inv, cachedList), 'DEL again (no cache) is fine');
    await run('ip', ['netns', 'del', ns]);
    await t.resolves(cniDel(inv, cachedList), 'DEL after the namespace is gone is fine');
    t.same(readdirSync(`${ipamDir(LAB, NODE)}/ekstest`).filter((f) => /^\d/.test(f)), [], 'address released');
    t.same(await nodeVeths(), [], 'eni veth removed');
  });

  t.test('eks-sim in IPv6 mode with egress-cni chained: the VPC CNI\'s wiring and result, CHECK, DEL', async (t) => {
    const egressDir = `${ipamDir(LAB, NODE)}-egress-test`;
    const list: Conflist = {
      cniVersion: '1.0.0', name: 'eks6test',
      plugins: [
        { type: 'eks-sim', ipam: { type: 'host-local', ranges: [[{ subnet: 'fd00:10:1::/64', rangeStart: 'fd00:10:1::100', rangeEnd: 'fd00:10:1::110' }]], dataDir: ipamDir(LAB, NODE) } },
        { type: 'egress-cni', nodeIP: '192.168.77.11', ipam: { type: 'host-local', ranges: [[{ subnet: '169.254.172.0/22' }]], routes: [{ dst: '0.0.0.0/0' }], dataDir: egressDir } },
      ],
    };
    const ns = podNetns(LAB, 'x', 'eks6');
    await run('ip', ['netns', 'add', ns]);
    const inv = { lab: LAB, node: NODE, containerId: 'c0ffee6' + '0'.repeat(57), netns: ns, podNamespace: 'x', podName: 'eks6' };
    const res = await cniAdd(inv, list);
    t.equal(res.ips?.length, 1, 'one IP: the egress address is no Pod IP');
    t.match(res.ips?.[0], { address: /^fd00:10:1::(10\d|110)\/128$/, gateway: 'fe80::1', interface: 1 });
    const names = (res.interfaces ?? []).map((i) => i.name);
    t.match(names, [/^eni[0-9a-f]{11}$/, 'eth0', /^dummy[0-9a-f]{11}$/, /^veth[0-9a-f]{8}$/, 'v4if0'], 'the VPC CNI\'s interfaces, then egress-cni\'s pair');
    t.same((res.interfaces ?? []).slice(0, 3).map((i) => i.mac), [undefined, '1', '0'], 'mac fields as the VPC CNI fills them (route table id, VLAN id)');
    const podIP = res.ips![0]!.address.split('/')[0]!;
    const route6 = (await runIn(ns, 'ip', ['-6', 'route', 'show', 'default'])).stdout;
    t.match(route6, /default via fe80::1 dev eth0/, 'IPv6 default route via fe80::1');
    t.match((await runIn(ns, 'ip', ['-6', 'neigh', 'show', 'fe80::1'])).stdout, /PERMANENT/, 'fe80::1 is a permanent neighbour');
    t.notMatch((await runIn(ns, 'ip', ['-6', 'addr', 'show', 'dev', 'eth0'])).stdout, /tentative/, 'ADD returned after DAD');
    t.match((await runIn(nodeNetns(LAB, NODE), 'ip', ['-6', 'route', 'show', `${podIP}/128`])).stdout, new RegExp(`dev ${names[0]}`), 'host route /128 to the eni veth');
    t.equal((await runIn(nodeNetns(LAB, NODE), 'cat', [`/proc/sys/net/ipv6/conf/${names[0]}/accept_ra`])).stdout.trim(), '0', 'host veth accept_ra=0');
    t.match((await runIn(ns, 'ip', ['-4', 'addr', 'show', 'dev', 'v4if0'])).stdout, /inet 169\.254\.17[2-5]\.\d+\/22/, 'v4if0 has an egress address');
    t.match((await runIn(ns, 'ip', ['-4', 'route', 'show', 'default'])).stdout, /via 169\.254\.172\.1 dev v4if0/, 'IPv4 default route via the egress gateway');
    const nat = async () => (await runIn(nodeNetns(LAB, NODE), 'iptables-save', ['-t', 'nat'])).stdout;
    t.match(await nat(), /-A CNI-E4-[0-9a-f]+ .*-j SNAT --to-source 192\.168\.77\.11/, 'SNAT to the node');

    await t.resolves(cniCheck(inv), 'CHECK passes on a fresh Pod');
    await runIn(ns, 'ip', ['-6', 'neigh', 'del', 'fe80::1', 'dev', 'eth0']);
    const broken = await cniCheck(inv).catch((e: unknown) => e);
    t.match((broken as CniPluginError).details, /permanent neighbour fe80::1 missing/, 'CHECK notices the missing gateway neighbour');

    await cniDel(inv, list);
    t.notMatch(await nat(), /CNI-E4-/, 'DEL removed the SNAT chain and its jump');
    t.same(await nodeVeths(), [], 'both host veths removed');
    t.same(readdirSync(`${ipamDir(LAB, NODE)}/eks6test`).filter((f) => f.includes(':')), [], 'IPv6 address released');
    t.same(readdirSync(`${egressDir}/eks6test`).filter((f) => /^169/.test(f)), [], 'egress address released');
    await t.resolves(cniDel(inv, list), 'DEL again is fine');
    await run('ip', ['netns', 'del', ns]);
    await t.resolves(cniDel(inv, list), 'DEL after the namespace is gone is fine');
  });

  t.test('bad sandbox input gets a clear error', async (t) => {
    await t.rejects(createPodSandbox({ lab: LAB, node: NODE, namespace: 'x', name: 'Bad_Name' }), /Pod name "Bad_Name" is not a DNS name/);
    await t.rejects(createPodSandbox({ lab: LAB, node: 'worker', namespace: 'x', name: 'a' }), /not a lab node name/);
    await t.rejects(createPodSandbox({ lab: 'la9zz', node: NODE, namespace: 'x', name: 'a' }), /lab la9zz does not exist/);
    await t.rejects(createPodSandbox({ lab: 'LA', node: NODE, namespace: 'x', name: 'a' }), /lab name "LA" must match/);
    await t.rejects(createPodSandbox({ lab: LAB, node: NODE, namespace: 'x', name: 'a', ports: [{ port: 0 }] }), /port 0 is not 1-65535/);
    const noPlugin = await createPodSandbox({ lab: LAB, node: NODE, namespace: 'x', name: 'np', conflist: { cniVersion: '1.0.0', name: 'labtest', plugins: [{ type: 'nope' }] } }).catch((e: unknown) => e);
    t.ok(noPlugin instanceof CniPluginError, 'a missing plugin is a CNI error');
    t.match((noPlugin as Error).message, /failed to find plugin "nope" in path/);
    t.notOk(existsSync(netnsPath(podNetns(LAB, 'x', 'np'))), 'and leaves no namespace');
    await t.resolves(cniDel({ lab: LAB, node: NODE, containerId: 'nothing', netns: 'la3-p-00000000', podNamespace: 'x', podName: 'none' }), 'DEL of an unknown container is a no-op');
  });
}
