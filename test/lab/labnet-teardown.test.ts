/**
 * destroyLab after a crash: state files gone, a stray process in a lab namespace and one outside
 * that only mentions the state dir. Everything must still be found (by name prefix / command line) and removed.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import {
  createLab, createPodSandbox, destroyLab, isAlive, labPids, listLabs, missingLabPrerequisites, nodeNetns, ovsDir, pidsMentioning, stateDir,
} from '../../lab/net/index.js';

const LAB = 'la4';
const missing = missingLabPrerequisites();


async function inNetns(pid: number, ino: number): Promise<boolean> {
  try {
    return statSync(`/proc/${pid}/ns/net`).ino === ino && readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('sleep');
  } catch {
    return false;
  }
}

function detached(file: string, args: string[]): number {
  const child = spawn(file, args, { detached: true, stdio: 'ignore' });
  child.unref();
  return child.pid!;
}

if (missing.length) {
  t.plan(0, `lab tests need ${missing.join(', ')}`);
} else {
  t.teardown(() => destroyLab(LAB).then(() => undefined));

  t.test('a crashed lab (no state files left) is found and removed completely', async (t) => {
    await destroyLab(LAB);
    await createLab({ name: LAB, nodes: 2, primary: 'eks' });
    const pods = await Promise.all([
      createPodSandbox({ lab: LAB, node: 'node-1', namespace: 'x', name: 'a', ports: [{ port: 80 }] }),
      createPodSandbox({ lab: LAB, node: 'node-2', namespace: 'x', name: 'b', ports: [{ port: 80, protocol: 'UDP' }] }),
      createPodSandbox({ lab: LAB, node: 'node-2', namespace: 'x', name: 'h', hostNetwork: true, ports: [{ port: 9090 }] }),
    ]);
    t.equal(pods.length, 3);
    const ovsPids = ['node-1', 'node-2'].flatMap((n) => ['ovsdb-server', 'ovs-vswitchd'].map((d) => Number(readFileSync(`${ovsDir(LAB, n)}/${d}.pid`, 'utf8'))));
    const workloadPids = readdirSync(`${stateDir(LAB)}/pods`).filter((f) => f.endsWith('.pid')).map((f) => Number(readFileSync(`${stateDir(LAB)}/pods/${f}`, 'utf8')));
    t.equal(workloadPids.length, 3, 'three workloads run');
    // Strays: something running inside a node namespace, and a process elsewhere naming the state dir.
    const inNode = detached('ip', ['netns', 'exec', nodeNetns(LAB, 'node-1'), 'sleep', '600']);
    const mentioning = detached(process.execPath, ['-e', 'setTimeout(() => {}, 600000)', `${stateDir(LAB)}/agent-marker`]);
    const nodeIno = statSync(`/var/run/netns/${nodeNetns(LAB, 'node-1')}`).ino;
    for (let i = 0; i < 200 && !(await inNetns(inNode, nodeIno)); i++) await new Promise((r) => setTimeout(r, 25));
    t.ok(await inNetns(inNode, nodeIno), 'the stray runs inside node-1\'s namespace');
    // The crash: every state file is gone.
    rmSync(stateDir(LAB), { recursive: true, force: true });
    t.ok((await listLabs()).includes(LAB), 'listLabs still finds the lab by its namespaces');
    const all = [...ovsPids, ...workloadPids, inNode, mentioning];
    t.same(all.filter((p) => !isAlive(p)), [], 'everything still runs before teardown');

    const report = await destroyLab(LAB);
    t.equal(report.netnsDeleted.length, 4 + 2, 'vpc, ext, 2 nodes and 2 Pod namespaces deleted');
    t.same(all.filter(isAlive), [], 'OVS, workloads and both strays are gone');
    t.same(readdirSync('/var/run/netns').filter((n) => n.startsWith(`${LAB}-`)), [], 'no namespace left');
    t.same(await labPids(LAB), []);
    t.same(pidsMentioning(`/run/sluice-lab/${LAB}/`), [], 'no process mentions the state dir');
    t.notOk(existsSync(stateDir(LAB)), 'no state dir');
    t.notOk((await listLabs()).includes(LAB), 'listLabs forgets it');
    const again = await destroyLab(LAB);
    t.same(again, { killed: [], netnsDeleted: [], stateDirRemoved: false }, 'destroying twice is harmless');
  });

  t.test('createLab of a new lab that fails half-way leaves nothing behind', async (t) => {
    // Occupy the external host's port 80 before the lab starts its servers there, so createLab fails late.
    await destroyLab(LAB);
    const { run } = await import('../../lab/net/index.js');
    await run('ip', ['netns', 'add', `${LAB}-ext`]);
    const blocker = detached('ip', ['netns', 'exec', `${LAB}-ext`, 'nc', '-l', '-k', '-p', '80']);
    let blocked = false;
    for (let i = 0; i < 50 && !blocked; i++) {
      blocked = (await run('ip', ['netns', 'exec', `${LAB}-ext`, 'ss', '-ltn', 'sport = :80'])).stdout.includes(':80');
      if (!blocked) await new Promise((r) => setTimeout(r, 50));
    }
    t.ok(blocked, 'port 80 is taken in the external host');
    await t.rejects(createLab({ name: LAB, nodes: 2 }), /workload in la4-ext did not start.*EADDRINUSE|address already in use/i);
    t.notOk(isAlive(blocker), 'the failed create cleaned the namespace it had found, including what ran there');
    t.same(readdirSync('/var/run/netns').filter((n) => n.startsWith(`${LAB}-`)), [], 'no namespace left');
    t.notOk(existsSync(stateDir(LAB)), 'no state dir');
    t.same(pidsMentioning(`/run/sluice-lab/${LAB}/`), [], 'no OVS left running');
  });
}
