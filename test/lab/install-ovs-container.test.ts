// test-schedule: exclusive: podman and its own PID namespace; watches daemons die and restart on a schedule.
/**
 * The `ovs` container's command from install/sluice.yaml, run for real: the exact script, in a
 * private network namespace (im-ovs-<pid>) with private OVS directories (OVS_RUNDIR, OVS_LOGDIR,
 * OVS_SYSCONFDIR, whose openvswitch/ plays the Pod's /etc/openvswitch hostPath). It must start
 * ovsdb-server + ovs-vswitchd and stay in the foreground, stop both and exit 0 on SIGTERM keeping
 * bridges and the system-id for the next start, and exit non-zero when a daemon dies. The last
 * part runs it as PID 1 of its own PID namespace, as in a container: the detached daemons are then
 * its children, and a dead one must still be noticed (the shell reaps it; a zombie would look alive).
 */
import t from 'tap';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseYamlDocuments } from '../../daemon/kube-yaml.js';

const OVS_CTL = '/usr/share/openvswitch/scripts/ovs-ctl';

function missing(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (network namespace, ovs-vswitchd)';
  if (!existsSync(OVS_CTL)) return `${OVS_CTL} not installed`;
  for (const tool of ['ip', 'unshare', 'nsenter', 'pgrep', 'ovsdb-server', 'ovs-vswitchd', 'ovs-vsctl', 'uuidgen']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `${tool} not installed`;
    }
  }
  return undefined;
}

function ovsScript(): string {
  const file = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'install', 'sluice.yaml');
  const docs = parseYamlDocuments(readFileSync(file, 'utf8')).map((d) => ('error' in d ? undefined : d.value)) as { kind?: string; spec?: { template: { spec: { containers: { name: string; command?: string[] }[] } } } }[];
  const ds = docs.find((d) => d?.kind === 'DaemonSet');
  const command = ds?.spec?.template.spec.containers.find((c) => c.name === 'ovs')?.command;
  if (command?.[0] !== 'sh' || command[1] !== '-c' || !command[2]) throw new Error(`ovs container command is not sh -c SCRIPT: ${JSON.stringify(command)}`);
  return command[2];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function waitFor(what: string, cond: () => boolean, ms = 30_000): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(200)) if (cond()) return;
  throw new Error(`gave up waiting: ${what}`);
}

const why = missing();
if (why) {
  t.plan(0, `skipped: ${why}`);
} else {
  const ns = `im-ovs-${process.pid}`;
  const dir = mkdtempSync('/tmp/im-ovs-');
  const env = { ...process.env, OVS_RUNDIR: join(dir, 'run'), OVS_LOGDIR: join(dir, 'log'), OVS_SYSCONFDIR: join(dir, 'etc') };
  const etc = join(dir, 'etc', 'openvswitch');   // ovs-ctl's dbdir and etcdir: the Pod's /etc/openvswitch mount
  mkdirSync(etc, { recursive: true });
  const script = ovsScript();
  let child: ChildProcess | undefined;

  const inNs = (args: string[]) => execFileSync('ip', ['netns', 'exec', ns, ...args], { env, encoding: 'utf8' });
  const vsctl = (...args: string[]) => inNs(['ovs-vsctl', `--db=unix:${env.OVS_RUNDIR}/db.sock`, '--timeout=30', ...args]).trim();
  const running = (): boolean => {
    try {
      execFileSync(OVS_CTL, ['status'], { env, stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  };
  const daemonPid = (d: string) => Number(readFileSync(join(env.OVS_RUNDIR, `${d}.pid`), 'utf8').trim());

  /** The container's main process: `ip netns exec` execs sh, so the child's pid is the script's.
   * With pid1, `unshare --fork` runs sh as PID 1 of a new PID namespace and exits with its status. */
  function startContainer(pid1 = false) {
    const prefix = pid1 ? ['unshare', '--pid', '--fork', '--mount-proc'] : [];
    const proc = spawn('ip', ['netns', 'exec', ns, ...prefix, 'sh', '-c', script], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    let output = '';
    proc.stdout.on('data', (b: Buffer) => { output += b.toString(); });
    proc.stderr.on('data', (b: Buffer) => { output += b.toString(); });
    let exit: { code: number | null; signal: string | null } | undefined;
    const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => {
      proc.on('exit', (code, signal) => { exit = { code, signal }; resolve(exit); });
    });
    return { proc, exited, alive: () => exit === undefined, output: () => output };
  }

  t.teardown(() => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    try { execFileSync(OVS_CTL, ['stop'], { env, stdio: 'ignore' }); } catch { /* nothing left running */ }
    try { execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' }); } catch { /* not created */ }
    rmSync(dir, { recursive: true, force: true });
  });
  execFileSync('ip', ['netns', 'add', ns]);

  let systemId = '';
  await t.test('starts OVS, stays in the foreground, and on SIGTERM stops it and exits 0', async (t) => {
    const c = startContainer();
    await waitFor('ovs-ctl status to report both daemons', () => running() || !c.alive());
    t.ok(c.alive(), 'the script is still running once the daemons are up');
    vsctl('--no-wait', 'add-br', 'im-br0', '--', 'set', 'Bridge', 'im-br0', 'datapath_type=netdev');
    systemId = vsctl('get', 'Open_vSwitch', '.', 'external_ids:system-id');
    t.equal(vsctl('--if-exists', 'get', 'Open_vSwitch', '.', 'other_config:flow-restore-wait'), '', 'a first start (no bridge yet) does not set flow-restore-wait');
    t.match(systemId, /^"?[0-9a-f-]{36}"?$/, 'a system-id is recorded');
    await sleep(6_000);   // longer than one status poll: the script must still be there
    t.ok(c.alive(), 'the script stays in the foreground while OVS runs');
    t.ok(running(), 'ovsdb-server and ovs-vswitchd are running');

    c.proc.kill('SIGTERM');
    const exit = await c.exited;
    t.same(exit, { code: 0, signal: null }, 'exits 0 on SIGTERM');
    t.notOk(running(), 'both daemons are stopped');
    t.match(c.output(), /stopping ovs-vswitchd and ovsdb-server/, 'says what it does');
  });

  await t.test('the next start keeps bridges and the system-id; a dying daemon makes it exit non-zero', async (t) => {
    const c = startContainer();
    await waitFor('ovs-ctl status to report both daemons', () => running() || !c.alive());
    t.ok(c.alive(), 'running again');
    t.match(vsctl('list-br'), /^im-br0$/m, 'the bridge survived the stop/start');
    t.equal(vsctl('get', 'Open_vSwitch', '.', 'external_ids:system-id'), systemId, 'the same system-id (persisted in /etc/openvswitch)');
    // Set before ovs-vswitchd started, so it never flushed the datapath; the agent ends it.
    t.equal(vsctl('get', 'Open_vSwitch', '.', 'other_config:flow-restore-wait'), '"true"', 'a restart over an existing bridge starts ovs-vswitchd with flow-restore-wait');
    t.match(c.output(), /bridges exist \(im-br0 \): starting with flow-restore-wait/, 'and says so');

    process.kill(daemonPid('ovs-vswitchd'), 'SIGKILL');
    const exit = await Promise.race([c.exited, sleep(30_000).then(() => undefined)]);
    t.ok(exit, 'the script exits after ovs-vswitchd dies');
    t.not(exit?.code, 0, 'with a non-zero status, so the kubelet restarts the container');
    t.match(c.output(), /a daemon is no longer running/, 'says why');
    t.notOk(running(), 'and stops ovsdb-server too');
  });

  await t.test('as PID 1 of a PID namespace (as in a container): a dead daemon is noticed, SIGTERM stops cleanly', async (t) => {
    const shPid = (c: ReturnType<typeof startContainer>) => Number(execFileSync('pgrep', ['-P', String(c.proc.pid)], { encoding: 'utf8' }).trim());
    const inPidNs = (pid: number, cmd: string) => execFileSync('nsenter', ['-t', String(pid), '-p', '-m', 'sh', '-c', cmd], { env, encoding: 'utf8' });
    const runningInside = (pid: number): boolean => {
      try {
        inPidNs(pid, `${OVS_CTL} status`);
        return true;
      } catch {
        return false;
      }
    };

    let c = startContainer(true);
    let sh = 0;
    await waitFor('sh to start in its PID namespace', () => { try { sh = shPid(c); return sh > 0; } catch { return !c.alive(); } });
    await waitFor('both daemons running', () => runningInside(sh) || !c.alive());
    // ovs-vswitchd --detach writes its pid file before the parent that forked it exits; only then is
    // the daemon reparented to PID 1 (a loaded machine widens that moment).
    const vswitchdParent = () => inPidNs(sh, 'echo $PPID; cat "$OVS_RUNDIR/ovs-vswitchd.pid" | xargs ps -o ppid= -p').split('\n')[1]?.trim();
    await waitFor('ovs-vswitchd\'s detaching parent to exit', () => vswitchdParent() === '1' || !c.alive(), 10_000).catch(() => undefined);
    t.equal(vswitchdParent(), '1', 'ovs-vswitchd is a child of the script (PID 1)');
    inPidNs(sh, 'kill -9 "$(cat "$OVS_RUNDIR/ovs-vswitchd.pid")"');
    const died = await Promise.race([c.exited, sleep(30_000).then(() => undefined)]);
    t.ok(died, 'the script exits after ovs-vswitchd dies');
    t.not(died?.code, 0, 'with a non-zero status');
    t.match(c.output(), /ovs-vswitchd .* is stale/, 'it saw the daemon gone (reaped, not a zombie)');

    c = startContainer(true);
    await waitFor('sh to start in its PID namespace', () => { try { sh = shPid(c); return sh > 0; } catch { return !c.alive(); } });
    await waitFor('both daemons running', () => runningInside(sh) || !c.alive());
    t.match(inPidNs(sh, `ovs-vsctl --db=unix:$OVS_RUNDIR/db.sock list-br`), /^im-br0$/m, 'the bridge is still there');
    process.kill(sh, 'SIGTERM');
    t.same(await c.exited, { code: 0, signal: null }, 'exits 0 on SIGTERM');
    t.match(c.output(), /Exiting ovs-vswitchd[\s\S]*Exiting ovsdb-server/, 'ovs-ctl stop asked both daemons to exit');
  });
}
