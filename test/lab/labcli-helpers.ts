/** Shared by the sluice-lab CLI lab tests: running the real CLI and checking what `down` left. */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { missingLabPrerequisites } from '../../lab/net/prereq.js';
import { repoRoot, stateDir } from '../../lab/net/names.js';

export const CLI = join(repoRoot(), 'dist', 'lab', 'cli.js');

/** Why the lab tests cannot run here, or undefined. */
export function skipReason(): string | undefined {
  const missing = missingLabPrerequisites();
  if (missing.length) return `sluice-lab tests need ${missing.join(', ')}`;
  for (const f of ['cli.js', 'supervisor.js', 'forwarder.js', 'net/workload.js', 'net/prober.js']) {
    if (!existsSync(join(repoRoot(), 'dist', 'lab', f))) return `dist/lab/${f} is missing: build first (npx tsc -p tsconfig.json)`;
  }
  return undefined;
}

/** skipReason() for labs with enforcing agents: the agent, the CNI binary and sluicectl must be built too. */
export function sluiceSkipReason(): string | undefined {
  const base = skipReason();
  if (base) return base;
  for (const f of [join('dist', 'daemon', 'main.js'), join('dist', 'bin', 'sluice-cni'), join('dist', 'daemon', 'sluicectl.js')]) {
    if (!existsSync(join(repoRoot(), f))) return `${f} is missing: build first (npm run build)`;
  }
  return undefined;
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

export function cli(args: string[], timeoutMs = 300_000): Promise<CliResult> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: performance.now() - started });
    });
  });
}

/** Runs the CLI and parses its stdout as JSON, failing loudly with stderr when it did not work. */
export async function cliJson<T>(args: string[]): Promise<T> {
  const r = await cli(args);
  if (r.code !== 0) throw new Error(`sluice-lab ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}

export function writeTemp(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'labcli-'));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

/** Every trace of a lab that `down` must remove; empty when nothing is left. */
export function labRemains(lab: string): string[] {
  const remains: string[] = [];
  const netnsDir = '/var/run/netns';
  if (existsSync(netnsDir)) for (const ns of readdirSync(netnsDir)) if (ns.startsWith(`${lab}-`)) remains.push(`netns ${ns}`);
  const dir = stateDir(lab);
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (cmd.includes(dir) && Number(pid) !== process.pid) remains.push(`process ${pid}: ${cmd.trim()}`);
    } catch {
      // gone meanwhile
    }
  }
  if (existsSync(dir)) remains.push(`directory ${dir}`);
  return remains;
}

/** IPv4 address inside a CIDR. */
export function inCidr(ip: string, cidr: string): boolean {
  const n = (a: string) => a.split('.').reduce((acc, o) => acc * 256 + Number(o), 0);
  const [base, bits] = cidr.split('/') as [string, string];
  const mask = Number(bits) === 0 ? 0 : (0xffffffff << (32 - Number(bits))) >>> 0;
  return ((n(ip) & mask) >>> 0) === ((n(base) & mask) >>> 0);
}

/** A small scenario: two pinned Pods (one per node), one left to the scheduler, a hostNetwork
 *  Pod, and Services with local/remote endpoints and a named target port. */
export const SMALL_SCENARIO = `
apiVersion: v1
kind: Namespace
metadata: {name: lbt, labels: {team: lab}}
---
apiVersion: v1
kind: Node
metadata: {name: node-2, labels: {zone: b}}
---
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: lbt, labels: {app: p1, tier: web}}
spec:
  nodeName: node-1
  containers:
    - name: s
      ports: [{name: http, containerPort: 80}, {name: dns, containerPort: 81, protocol: UDP}]
---
apiVersion: v1
kind: Pod
metadata: {name: p2, namespace: lbt, labels: {app: p2, tier: web}}
spec:
  nodeName: node-2
  containers:
    - name: s
      ports: [{name: http, containerPort: 80}, {name: dns, containerPort: 81, protocol: UDP}]
---
apiVersion: v1
kind: Pod
metadata: {name: p3, namespace: lbt, labels: {app: p3}}
spec:
  containers:
    - name: s
      ports: [{name: http, containerPort: 80}, {name: dns, containerPort: 81, protocol: UDP}]
---
apiVersion: v1
kind: Pod
metadata: {name: hn, namespace: lbt, labels: {app: hn}}
spec:
  nodeName: node-2
  hostNetwork: true
  containers:
    - name: s
      ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: lbt}
spec:
  selector: {app: p1}
  ports: [{name: web, port: 8000, targetPort: http}, {name: dns, port: 53, protocol: UDP, targetPort: 81}]
---
apiVersion: v1
kind: Service
metadata: {name: svc2, namespace: lbt}
spec:
  selector: {app: p2}
  ports: [{name: web, port: 8000, targetPort: http}, {name: dns, port: 53, protocol: UDP, targetPort: 81}]
---
apiVersion: v1
kind: Service
metadata: {name: extra, namespace: lbt}
spec:
  selector: {extra: "yes"}
  ports: [{name: web, port: 80}]
`;

export interface PodJson {
  metadata: { name: string; namespace: string; labels?: Record<string, string> };
  spec: { nodeName?: string; hostNetwork?: boolean };
  status: { phase?: string; podIP?: string; hostIP?: string };
}
export interface ListJson<T> {
  apiVersion: string;
  kind: string;
  items: T[];
}
export interface ProbeJson {
  from: string;
  to: string;
  port: number;
  protocol: string;
  verdict: string;
}
