/** A policy flipping a probed pair between allow and deny, the probers' expectation following the agent's commit; recovery: API change → enforcement. */
import { performance } from 'node:perf_hooks';
import { resolveKind } from '../kinds.js';
import { sleep } from '../net/exec.js';
import { clientFor } from '../ops.js';
import { type ChaosRun, waitUntil } from './harness.js';
import type { FlippedTarget } from './traffic.js';

export async function verdictFlips(run: ChaosRun): Promise<void> {
  // Churn that changes a probed verdict: a policy allowing z into x/c on port 81 appears and goes
  // away. The probers' expectation for that pair follows the agent's commit, read from x/c's node:
  // the policy's presence in GET /policies, then `changes` in /status at that moment, then
  // `committedChanges` reaching it. Recovery is the API change -> enforcement window.
  const xc = run.pod('x/c');
  const flipped: FlippedTarget = { ip: xc.status.podIP, port: 81, epoch: 0, settled: 'deny', seen: { allow: 0, deny: 0 } };
  const FLIP = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'flip-allow-z-81', namespace: 'x' }, spec: { podSelector: { matchLabels: { pod: 'c' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }], ports: [{ protocol: 'TCP', port: 81 }] }] } };
  let flips = 0;
  await run.scenario(`verdict flips: z -> x/c:81 allowed and denied by turns`, run.quick ? 6 : 20, async () => {
    const rest = clientFor(run.info);
    const np = resolveKind('networkpolicies');
    const allow = flipped.settled !== 'allow';
    const enforced = async () => ((((await run.status(xc.spec.nodeName, '/policies'))?.policies ?? []) as { name: string }[]).some((p) => p.name === FLIP.metadata.name));
    const enforcement = async () => (await run.status(xc.spec.nodeName))?.enforcement as { changes: number; committedChanges: number } | undefined;
    flipped.settled = undefined;
    flipped.epoch++;
    const k = performance.now();
    if (allow) await rest.apply(np, FLIP as never);
    else await rest.delete(np, FLIP.metadata.name, 'x');
    await waitUntil('the flip seen by the agent', async () => (await enforced()) === allow, 30_000);
    const seen = (await enforcement())!.changes;
    await waitUntil('the flip committed', async () => ((await enforcement())?.committedChanges ?? 0) >= seen, 30_000);
    const window = Math.round(performance.now() - k);
    flipped.settled = allow ? 'allow' : 'deny';
    flips++;
    // Long enough for the probers to open several connections under the committed verdict.
    await sleep(run.quick ? 3500 : 4000);
    return window;
  }, flipped);
  if (flipped.settled === 'allow') await clientFor(run.info).delete(resolveKind('networkpolicies'), FLIP.metadata.name, 'x');
  const flipRow = run.ranLast('verdict flips');
  if (flipRow) console.error(`verdict flips: ${flips} flips; under a committed verdict z -> x/c:81 connected ${flipped.seen.allow} times while allowed and failed ${flipped.seen.deny} times while denied`);
  if (flipRow && (flipped.seen.allow === 0 || flipped.seen.deny === 0)) {
    flipRow.broken++;
    console.error('verdict flips: BROKEN: the probers never saw one of the two verdicts, so the flip check saw nothing');
  }
}
