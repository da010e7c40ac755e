/**
 * The simulator's side of a comparison: the lab's objects exactly as its API server holds them
 * (with the real Pod IPs, nodes, ClusterIPs and EndpointSlices) written to a manifest file, and
 * `sluicectl simulate -f <that file> --probes <the same probes> -o json` run on it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dumpYaml } from '../../daemon/kube-yaml.js';
import type { KubeObject, Probe, ProbeResult } from '../../daemon/policy/types.js';
import { apiVersionOf, POLICY_INPUT_KINDS } from '../kinds.js';
import { repoRoot } from '../net/names.js';
import { run } from '../net/exec.js';
import { ApiError, type RestClient } from '../restclient.js';

/** Every object of every kind the lab serves (a kind whose CRD is absent contributes nothing). */
export async function exportState(rest: RestClient): Promise<KubeObject[]> {
  const lists = await Promise.all(
    POLICY_INPUT_KINDS.map(async (k) => {
      try {
        return (await rest.list(k)).items.map((o) => ({ ...o, apiVersion: o.apiVersion ?? apiVersionOf(k), kind: o.kind ?? k.kind }));
      } catch (err) {
        if (err instanceof ApiError && err.code === 404) return [];
        throw err;
      }
    }),
  );
  return lists.flat();
}

export const SLUICECTL = (): string => join(repoRoot(), 'dist', 'daemon', 'sluicectl.js');

export interface SimulateRun {
  results: ProbeResult[];
  /** Validation errors simulate printed (objects it skipped). */
  warnings: string[];
}

/** `sluicectl simulate` on the given objects and probes (a temporary directory holds both files). */
export async function simulate(objects: KubeObject[], probes: Probe[], keepDir?: string): Promise<SimulateRun> {
  const dir = keepDir ?? mkdtempSync(join(tmpdir(), 'md-sim-'));
  try {
    const scenario = join(dir, 'objects.yaml');
    const probeFile = join(dir, 'probes.json');
    writeFileSync(scenario, objects.map((o) => dumpYaml(o)).join('---\n'));
    writeFileSync(probeFile, JSON.stringify(probes));
    const r = await run(process.execPath, [SLUICECTL(), 'simulate', '-f', scenario, '--probes', probeFile, '-o', 'json'], { allowFail: true, timeoutMs: 120_000 });
    if (r.exitCode !== 0) throw new Error(`sluicectl simulate exited ${r.exitCode}: ${r.stderr.trim()}`);
    return { results: JSON.parse(r.stdout) as ProbeResult[], warnings: r.stderr.split('\n').filter(Boolean) };
  } finally {
    if (!keepDir) rmSync(dir, { recursive: true, force: true });
  }
}
