/**
 * sluice-cni chained after the real reference `ptp` plugin, with this test acting as the runtime
 * (libcni's chaining rules: each plugin gets the previous one's result as prevResult; DEL runs in
 * reverse with the final ADD result). Everything runs inside a private "node" network namespace,
 * so ptp's host-side veth and routes never touch the machine's root namespace.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { startCniServer } from '../../daemon/cni/server.js';
import { CNI_BINARY, RecordingHandler, buildCniBinary, capturingLogger, tempDir } from '../unit/cni-harness.js';

const PTP = '/usr/lib/cni/ptp';
const CNI_DIR = '/usr/lib/cni';
if (process.getuid?.() !== 0) {
  t.plan(0, 'needs root (network namespaces)');
  process.exit(0);
}
if (!existsSync(PTP) || !existsSync(join(CNI_DIR, 'host-local'))) {
  t.plan(0, `needs the reference CNI plugins (${PTP}, host-local)`);
  process.exit(0);
}

buildCniBinary();
const tag = `cn${process.pid}`;
const nodeNs = `${tag}-node`;
const podNs = `${tag}-pod`;
const tmp = tempDir();
const socketPath = join(tmp.dir, 'cni.sock');
const handler = new RecordingHandler();
const server = await startCniServer(socketPath, handler, capturingLogger().log);

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();
t.teardown(async () => {
  await server.close();
  for (const ns of [podNs, nodeNs]) {
    try {
      ip('netns', 'del', ns);
    } catch {
      // already gone
    }
  }
  tmp.remove();
});
ip('netns', 'add', nodeNs);
ip('netns', 'add', podNs);
ip('-n', nodeNs, 'link', 'set', 'lo', 'up');

/** Runs one plugin inside the node namespace like a runtime; resolves with exit code and stdout. */
function exec(binary: string, command: string, config: object, ifName: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('ip', ['netns', 'exec', nodeNs, binary], {
      env: {
        PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
        CNI_COMMAND: command,
        CNI_CONTAINERID: `${tag}-${ifName}`,
        CNI_NETNS: `/var/run/netns/${podNs}`,
        CNI_IFNAME: ifName,
        CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=chain-${ifName}`,
        CNI_PATH: CNI_DIR,
      },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.on('error', () => undefined);
    child.stdin.end(JSON.stringify(config));
  });
}

const versions = ['0.3.1', '0.4.0', '1.0.0'];
for (const [i, cniVersion] of versions.entries()) {
  t.test(`[ptp, sluice-cni] at cniVersion ${cniVersion}: sluice hands on ptp's result unchanged`, async (t) => {
    const ifName = `eth${i}`;
    const network = { cniVersion, name: 'cnchain' };
    const ptpConf = {
      ...network,
      type: 'ptp',
      ipam: { type: 'host-local', subnet: `10.199.${i}.0/24`, dataDir: join(tmp.dir, 'ipam'), routes: [{ dst: '0.0.0.0/0' }] },
    };
    const sluiceConf = { ...network, type: 'sluice-cni', socketPath };
    handler.calls = [];

    const ptpAdd = await exec(PTP, 'ADD', ptpConf, ifName);
    t.equal(ptpAdd.code, 0, `ptp ADD: ${ptpAdd.stdout} ${ptpAdd.stderr}`);
    const ptpResult = JSON.parse(ptpAdd.stdout) as Record<string, unknown>;

    const add = await exec(CNI_BINARY, 'ADD', { ...sluiceConf, prevResult: ptpResult }, ifName);
    t.equal(add.code, 0, `sluice ADD: ${add.stderr}`);
    const final = JSON.parse(add.stdout) as Record<string, unknown>;
    t.same(final, ptpResult, 'the chain result is exactly what ptp returned');

    const call = handler.calls.find((c) => c.op === 'add');
    if (call?.op !== 'add') throw new Error('the agent saw no ADD');
    t.match(call.req, { containerId: `${tag}-${ifName}`, ifName, netns: `/var/run/netns/${podNs}`, podNamespace: 'default', podName: `chain-${ifName}`, cniVersion });
    const podIp = (ptpResult.ips as { address: string }[])[0]!.address;
    t.equal(call.req.prevResult?.ips?.[0]?.address, podIp, 'the agent sees the Pod IP ptp assigned');
    t.match(ip('-n', podNs, 'addr', 'show', 'dev', ifName), podIp.split('/')[0]!, 'the Pod interface really exists');

    if (cniVersion !== '0.3.1') {
      const check = await exec(CNI_BINARY, 'CHECK', { ...sluiceConf, prevResult: final }, ifName);
      t.equal(check.code, 0, `sluice CHECK: ${check.stderr}`);
    }

    // DEL in reverse order, each plugin given the final ADD result.
    const del = await exec(CNI_BINARY, 'DEL', { ...sluiceConf, prevResult: final }, ifName);
    t.equal(del.code, 0, `sluice DEL: ${del.stderr}`);
    const ptpDel = await exec(PTP, 'DEL', { ...ptpConf, prevResult: final }, ifName);
    t.equal(ptpDel.code, 0, `ptp DEL: ${ptpDel.stderr}`);
    t.notMatch(ip('-n', podNs, 'link', 'show'), ifName, 'Pod interface gone');
    t.same(
      handler.calls.filter((c) => c.phase === 'end').map((c) => c.op),
      cniVersion === '0.3.1' ? ['add', 'del'] : ['add', 'check', 'del'],
    );
  });
}
