/**
 * The lab's side of a comparison: TCP/UDP probes as real packets (`probeLab`, one prober process
 * per source), SCTP probes by ofproto/trace (lab/proof/trace.ts), each such result noting so.
 */
import type { KubeObject, Probe, ProbeResult } from '../../daemon/policy/types.js';
import { sluiceOnNodes, type ControlInfo } from '../control.js';
import { resolveKind } from '../kinds.js';
import { clientFor, probeLab } from '../ops.js';
import { traceProbes } from './trace.js';

export const SCTP_NOTE = 'SCTP: verdict from ofproto/trace of a synthetic packet, not real packets';

export async function probeWithPackets(info: ControlInfo, probes: Probe[], pods?: KubeObject[]): Promise<ProbeResult[]> {
  const packetIdx: number[] = [];
  const traceIdx: number[] = [];
  probes.forEach((p, i) => (p.protocol === 'SCTP' ? traceIdx : packetIdx).push(i));
  const out: ProbeResult[] = new Array(probes.length);
  const podList = traceIdx.length ? (pods ?? (await clientFor(info).list(resolveKind('pods'))).items) : [];
  if (traceIdx.length && !sluiceOnNodes(info)) throw new Error('SCTP probes need the bridges: bring the lab up with --sluice, or install sluice (install/sluice.yaml)');
  await Promise.all([
    packetIdx.length
      ? probeLab(info, packetIdx.map((i) => probes[i]!)).then((rs) => rs.forEach((r, k) => (out[packetIdx[k]!] = r)))
      : undefined,
    traceIdx.length
      ? traceProbes(traceIdx.map((i) => probes[i]!), { lab: info.name, nodes: info.nodes, pods: podList }).then((rs) =>
          rs.forEach((r, k) => (out[traceIdx[k]!] = { ...probes[traceIdx[k]!]!, verdict: r.verdict, note: `${SCTP_NOTE} (${r.detail})` })),
        )
      : undefined,
  ]);
  return out;
}
