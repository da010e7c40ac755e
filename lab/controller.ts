/**
 * sluice-controller replicas in a lab: processes on the host (the lab has no Deployment
 * controller), each with the host kubeconfig, listening on 127.0.0.1 at its own port, as the
 * Deployment's replicas would behind their Service. Tests start and kill them to exercise the
 * leader election and the agents' reconnection.
 */
import { spawn } from 'node:child_process';
import { request } from 'node:https';
import { closeSync, existsSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hostKubeconfigPath } from './control.js';
import { sleep } from './net/exec.js';
import { repoRoot, stateDir } from './net/names.js';

/** The namespace the lab's controllers keep their Lease, Secret and CA ConfigMap in (as install/controller.yaml). */
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
