/**
 * How long the lab takes, through the real CLI, with the demo workload (examples/workload.yaml:
 * 2 nodes, 9 Pods, 9 Services): `sluice-lab up`, the 9×9 Pods × {80,81} × {TCP,UDP} = 324-probe
 * matrix (R runs), and `down`. Lab name lbb. Needs root and the lab's tools (prints why not
 * otherwise). Not a test: nothing is asserted.
 *
 *   npx tsc -p tsconfig.json && node dist/bench/lab-demo.js [R]
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { missingLabPrerequisites } from '../lab/net/prereq.js';
import { repoRoot } from '../lab/net/names.js';

const RUNS = Number(process.argv[2] ?? 5);
const LAB = 'lbb';
const cli = join(repoRoot(), 'dist', 'lab', 'cli.js');

function run(args: string[]): Promise<{ ms: number; stdout: string }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, ...args, '--name', LAB], { stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve({ ms: performance.now() - started, stdout }) : reject(new Error(`sluice-lab ${args.join(' ')} exited ${code}`))));
  });
}

const missing = missingLabPrerequisites();
if (missing.length) {
  console.log(`skipped: the lab needs ${missing.join(', ')}`);
} else {
  try {
    await run(['down']);
    const up = await run(['up', '-f', join(repoRoot(), 'examples', 'workload.yaml')]);
    console.log(`sluice-lab up (2 nodes, 9 Pods, 9 Services, primary ptp): ${(up.ms / 1000).toFixed(2)} s`);
    const times: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const p = await run(['probe', '-o', 'json']);
      const results = JSON.parse(p.stdout) as { verdict: string }[];
      times.push(p.ms);
      if (i === 0) console.log(`probe: ${results.length} probes, ${results.filter((r) => r.verdict === 'allow').length} allowed`);
    }
    times.sort((a, b) => a - b);
    console.log(`sluice-lab probe, 324 probes, whole command incl. node start-up (${RUNS} runs): min ${(times[0]! / 1000).toFixed(2)} s, median ${(times[Math.floor(RUNS / 2)]! / 1000).toFixed(2)} s, max ${(times[RUNS - 1]! / 1000).toFixed(2)} s`);
  } finally {
    const down = await run(['down']);
    console.log(`sluice-lab down: ${(down.ms / 1000).toFixed(2)} s`);
  }
}
