/**
 * Lab verdicts against simulator verdicts (pure): which probes differ, and a table of them.
 */
import type { Probe, ProbeResult } from '../../daemon/policy/types.js';
import { table } from '../output.js';

export const probeKey = (p: Probe): string => `${p.from} -> ${p.to} ${p.port}/${p.protocol}`;

export interface Mismatch {
  probe: Probe;
  lab: string;
  simulate: string;
  how: string;
}

/** Every probe whose lab verdict differs from the simulator's (or is missing on either side). */
export function compareVerdicts(probes: Probe[], lab: ProbeResult[], sim: ProbeResult[]): Mismatch[] {
  const labBy = new Map(lab.map((r) => [probeKey(r), r]));
  const simBy = new Map(sim.map((r) => [probeKey(r), r]));
  const out: Mismatch[] = [];
  for (const p of probes) {
    const l = labBy.get(probeKey(p));
    const s = simBy.get(probeKey(p));
    if (l?.verdict !== s?.verdict || !l || !s) {
      out.push({ probe: p, lab: l?.verdict ?? 'missing', simulate: s?.verdict ?? 'missing', how: [l?.note, s?.decidedBy ? describe(s.decidedBy) : s ? 'default' : ''].filter(Boolean).join('; ') });
    }
  }
  return out;
}

const describe = (d: NonNullable<ProbeResult['decidedBy']>): string =>
  `simulate: ${d.direction} ${d.kind} ${d.namespace ? `${d.namespace}/` : ''}${d.name}${d.rule ? ` rule ${d.rule}` : ''}`;

export function mismatchTable(ms: Mismatch[]): string {
  if (ms.length === 0) return 'no differences';
  return table(
    ['FROM', 'TO', 'PORT', 'LAB', 'SIMULATE', 'WHY'],
    ms.map((m) => [m.probe.from, m.probe.to, `${m.probe.port}/${m.probe.protocol}`, m.lab, m.simulate, m.how]),
  );
}
