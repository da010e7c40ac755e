/**
 * sluice-controller replicas in a lab: processes on the host (the lab has no Deployment
 * controller), each with the host kubeconfig, listening on 127.0.0.1 at its own port, as the
 * Deployment's replicas would behind their Service. Tests start and kill them to exercise the
 * leader election and the agents' reconnection.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { request } from 'node:https';
import { closeSync, existsSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { hostKubeconfigPath } from './control.js';
import { sleep } from './net/exec.js';
import { nodeNetns, nodeStateDir, repoRoot, stateDir } from './net/names.js';

/** The namespace the lab's controllers keep their Lease, Secret and CA ConfigMap in (as install/sluice.yaml). */
export const CONTROLLER_NAMESPACE = 'sluice-system';

export const controllerLogPath = (lab: string, identity: string): string => join(stateDir(lab), `controller-${identity}.log`);
export const controllerPidPath = (lab: string, identity: string): string => join(stateDir(lab), `controller-${identity}.pid`);

export interface LabController {
  identity: string;
  pid: number;
  port: number;
  /** https://127.0.0.1:<port> */
  url: string;
}

/**
 * The lab replica's settings: the lab enforces no RBAC, so its admin reads every Node's view by
 * name; and a short history (events kept per Node), so an agent cut off for a while gets 410 Gone
 * and lists again, as one away longer than the production history would.
 */
export const LAB_CONTROLLER_ARGS: readonly string[] = ['--read-all-users', 'sluice-lab-admin', '--events-per-node', '50'];

/**
 * Starts one replica and waits until it answers /healthz (it answers before it leads; /readyz
 * says whether it serves). `args` are added to its command line.
 */
export async function startController(lab: string, identity: string, port: number, args: string[] = [], timeoutMs = 30_000): Promise<LabController> {
  const main = join(repoRoot(), 'dist', 'daemon', 'controller', 'main.js');
  if (!existsSync(main)) throw new Error(`${main} is missing (sluice is not built)`);
  const log = openSync(controllerLogPath(lab, identity), 'a');
  const child = spawn(process.execPath, [
    main, '--kubeconfig', hostKubeconfigPath(lab), '--listen', `127.0.0.1:${port}`, '--namespace', CONTROLLER_NAMESPACE, '--identity', identity,
    '--certificate-ips', '127.0.0.1', ...args,
  ], { detached: true, stdio: ['ignore', log, log] });
  closeSync(log);
  let exited: number | null | undefined;
  child.on('exit', (code) => (exited = code));
  child.unref();
  writeFileSync(controllerPidPath(lab, identity), `${child.pid}\n`);
  const url = `https://127.0.0.1:${port}`;
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && exited === undefined) {
    const up = await healthy(port);
    if (up) return { identity, pid: child.pid!, port, url };
    await sleep(100);
  }
  const tail = existsSync(controllerLogPath(lab, identity)) ? readFileSync(controllerLogPath(lab, identity), 'utf8').trim().split('\n').slice(-5).join('\n  ') : '';
  throw new Error(`sluice-controller ${identity} ${exited !== undefined ? `exited (${exited})` : `did not answer /healthz within ${timeoutMs / 1000} s`}; log ${controllerLogPath(lab, identity)}:\n  ${tail}`);
}

/** kill -9 of replicas (a test's teardown: gone ones are skipped). */
export function killControllers(replicas: readonly LabController[]): void {
  for (const c of replicas) {
    try {
      process.kill(c.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/** A TCP port nothing listens on now, on 127.0.0.1 (for a replica). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer().once('error', reject).listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** Whether the replica at `port` answers /healthz (a liveness check: its certificate is not verified here). */
function healthy(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/healthz', rejectUnauthorized: false, timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

/**
 * A GET to the replica at `port` (on 127.0.0.1): its status and body, code 0 with the error as the
 * body when it could not be asked. The certificate is verified with `ca` when given.
 */
export function controllerGet(port: number, path: string, ca?: string, token?: string): Promise<{ code: number; body: string }> {
  return new Promise((resolve) => {
    const tls = ca ? { ca, servername: 'sluice-controller.sluice-system.svc' } : { rejectUnauthorized: false };
    const req = request({ host: '127.0.0.1', port, path, ...tls, headers: token ? { authorization: `Bearer ${token}` } : {}, timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ code: res.statusCode ?? 0, body }));
    });
    req.on('error', (err) => resolve({ code: 0, body: err.message }));
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.end();
  });
}

/**
 * Passes each connection to `listen` (a port on 127.0.0.1, or a unix socket path) on to
 * 127.0.0.1:`target()`, read per connection (a Service whose endpoint moves). `close` ends the
 * connections it carries as well: their replica is going away, and a server's own close would wait
 * for them (an agent's watch lasts).
 */
export async function tcpRelay(listen: number | string, target: () => number): Promise<{ close(): Promise<void> }> {
  const open = new Set<net.Socket>();
  const server = net.createServer((conn) => {
    const up = net.connect(target(), '127.0.0.1');
    const end = () => {
      conn.destroy();
      up.destroy();
    };
    for (const s of [conn, up]) {
      open.add(s);
      s.on('error', end);
      s.on('close', () => {
        open.delete(s);
        end();
      });
    }
    conn.pipe(up).pipe(conn);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const ready = () => {
      server.off('error', reject);
      resolve();
    };
    if (typeof listen === 'number') server.listen(listen, '127.0.0.1', ready);
    else server.listen(listen, ready);
  });
  return {
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const s of open) s.destroy();
    }),
  };
}

/** Where the lab's agents reach the controller's Service inside their node namespace. */
export const CONTROLLER_PORT_IN_NODE = 10351;

export interface ControllerService {
  /** https://127.0.0.1:<CONTROLLER_PORT_IN_NODE>, as an agent in a node namespace dials it. */
  url: string;
  /** Sends new connections to the replica listening on `port` (the Service's endpoint moves). */
  setTarget(port: number): void;
  close(): Promise<void>;
}

/**
 * The controller's Service for the lab's agents: inside each node namespace a forwarder listens on
 * 127.0.0.1:CONTROLLER_PORT_IN_NODE and passes the bytes to a unix socket in the lab's state dir,
 * where this process relays them to the replica `setTarget` names (TLS ends at the controller).
 */
export async function controllerServiceInNodes(lab: string, nodes: readonly string[], targetPort: number): Promise<ControllerService> {
  const socket = join(stateDir(lab), 'controller.sock');
  rmSync(socket, { force: true });
  let target = targetPort;
  const relay = await tcpRelay(socket, () => target);
  const script = join(repoRoot(), 'dist', 'lab', 'forwarder.js');
  const forwarders: ChildProcess[] = nodes.map((node) =>
    spawn('ip', ['netns', 'exec', nodeNetns(lab, node), process.execPath, script, '--listen', `127.0.0.1:${CONTROLLER_PORT_IN_NODE}`, '--unix', socket, '--parent', String(process.pid)], { stdio: 'ignore' }),
  );
  const close = async () => {
    for (const f of forwarders) f.kill('SIGTERM');
    await relay.close();
    rmSync(socket, { force: true });
  };
  for (const node of nodes) {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const ok = await new Promise<boolean>((resolve) => {
        const c = spawn('ip', ['netns', 'exec', nodeNetns(lab, node), 'nc', '-z', '-w', '1', '127.0.0.1', String(CONTROLLER_PORT_IN_NODE)], { stdio: 'ignore' });
        c.on('exit', (code) => resolve(code === 0));
        c.on('error', () => resolve(false));
      });
      if (ok) break;
      if (Date.now() > deadline) {
        await close();
        throw new Error(`the controller's forwarder in ${node} does not listen on 127.0.0.1:${CONTROLLER_PORT_IN_NODE}`);
      }
      await sleep(50);
    }
  }
  return { url: `https://127.0.0.1:${CONTROLLER_PORT_IN_NODE}`, setTarget: (port) => (target = port), close };
}

/**
 * An agent's settings for controller mode in a lab (agent.yaml overrides): the Service above, the
 * controller's CA and a ServiceAccount token bound to a Pod on the node (the controller reads the
 * Node from it), written next to the node's other files.
 */
export function controllerModeSettings(lab: string, node: string, caCert: string, token: string): Record<string, unknown> {
  const caFile = join(nodeStateDir(lab, node), 'controller-ca.crt');
  const tokenFile = join(nodeStateDir(lab, node), 'controller-token');
  writeFileSync(caFile, caCert);
  writeFileSync(tokenFile, token, { mode: 0o600 });
  const settings = { policySource: 'controller', controllerServer: `https://127.0.0.1:${CONTROLLER_PORT_IN_NODE}`, controllerCAFile: caFile, controllerTokenFile: tokenFile };
  // Kept with the node: an agent started again (a test, a chaos scenario) stays in controller mode.
  writeFileSync(controllerModePath(lab, node), `${JSON.stringify(settings)}\n`);
  return settings;
}

const controllerModePath = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'controller-mode.json');

/** The controller-mode settings the node's agent was given last (undefined: a standalone node). */
export function savedControllerModeSettings(lab: string, node: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(readFileSync(controllerModePath(lab, node), 'utf8')) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}
