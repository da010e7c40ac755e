/**
 * Model = datapath for one scenario on a running lab: run its steps in order (apply, delete,
 * relabel, then wait until controllers and agents converged); after each step export what the API
 * server holds, send the probes as real packets (SCTP by trace) and, in parallel, run
 * `sluicectl simulate` on the exported objects with the same probes; report every difference.
 */
import type { KubeObject, Probe, ProbeResult } from '../../daemon/policy/types.js';
import type { ControlInfo } from '../control.js';
import { kindOfObject } from '../kinds.js';
import { compareVerdicts, type Mismatch, probeKey } from './compare.js';
import { LabDriver } from './driver.js';
import { scenarioProbes, type ProbeSetOptions } from './probeset.js';
import { exportState, simulate } from './simulate.js';
import { changedLabels, splitSteps } from './steps.js';

export interface StepReport {
  step: string;
  probes: Probe[];
  lab: ProbeResult[];
  simulate: ProbeResult[];
  mismatches: Mismatch[];
  /**
   * Differed on the first probe but agreed with the simulator when probed again right away (a
   * lost datagram under load, say). Reported, never silently dropped; `mismatches` differed twice.
   */
  unstable: Mismatch[];
  /** Objects `sluicectl simulate` reported invalid (and skipped). */
  warnings: string[];
  /** Policy flows per node after the step (0 everywhere: the agents do not enforce). */
  signal: string;
  ms: { converge: number; compare: number };
}

export interface VerifyOptions {
  /** Delete every policy object in the lab first (default true). */
  reset?: boolean;
  /** Fixed probes instead of the generated set. */
  probes?: Probe[];
  probeSet?: ProbeSetOptions;
  /** Called after each step's comparison, before the next step changes anything (awaited). */
  onStep?: ((r: StepReport) => void | Promise<void>) | undefined;
}

export async function verifyScenario(info: ControlInfo, objects: KubeObject[], opts: VerifyOptions = {}): Promise<StepReport[]> {
  const steps = splitSteps(objects);
  const driver = new LabDriver(info);
  if (opts.reset ?? true) await driver.deletePolicies();
  const reports: StepReport[] = [];
  for (const step of steps) {
    const t0 = performance.now();
    if (step.apply.length) await driver.write(step.apply);
    for (const ref of step.delete) {
      const kind = kindOfObject(ref);
      await driver.rest.delete(kind, ref.name, kind.namespaced ? ref.namespace ?? 'default' : undefined);
    }
    for (const change of step.label) {
      const kind = kindOfObject({ apiVersion: 'v1', kind: change.kind });
      const current = await driver.rest.get(kind, change.name, change.kind === 'Pod' ? change.namespace : undefined);
      await driver.relabelOnly({ ...current, apiVersion: 'v1', kind: change.kind, metadata: { ...current.metadata, labels: changedLabels(current.metadata.labels, change) } });
    }
    const converged = await driver.settle();
    const t1 = performance.now();
    const state = await exportState(driver.rest);
    const probes =
      opts.probes ??
      scenarioProbes(
        state.filter((o) => o.kind === 'Pod'),
        state.filter((o) => o.kind === 'Service'),
        { nodes: state.filter((o) => o.kind === 'Node'), ...opts.probeSet },
      );
    const [lab, sim] = await Promise.all([driver.probeAll(probes), simulate(state, probes)]);
    const first = compareVerdicts(probes, lab, sim.results);
    let mismatches = first;
    let unstable: Mismatch[] = [];
    if (first.length) {
      const again = await driver.probeAll(first.map((m) => m.probe));
      const still = new Set(compareVerdicts(again, again, sim.results).map((m) => probeKey(m.probe)));
      mismatches = first.filter((m) => still.has(probeKey(m.probe)));
      unstable = first.filter((m) => !still.has(probeKey(m.probe)));
    }
    const report: StepReport = {
      step: step.name,
      probes,
      lab,
      simulate: sim.results,
      mismatches,
      unstable,
      warnings: sim.warnings,
      signal: converged.note ? `${converged.signal} (${converged.note})` : converged.signal,
      ms: { converge: t1 - t0, compare: performance.now() - t1 },
    };
    reports.push(report);
    await opts.onStep?.(report);
  }
  return reports;
}
