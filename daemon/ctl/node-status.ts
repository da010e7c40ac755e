/** `sluicectl node status`: what the agent on this node reports (readiness, gateway, Pods, last resync, guarded new Pods). */
import type { CommandModule } from 'yargs';
import type { EnforcerStatus } from '../enforcement/status.js';
import { agentStatus, type NodeArgs, nodeContext, withConfig } from './node-common.js';

export const nodeStatusCommand: CommandModule<object, NodeArgs & { json: boolean }> = {
  command: 'status',
  describe: "the local agent's state: ready, node IP, gateway, attached Pods, last resync repairs",
  builder: (y) => withConfig(y).option('json', { type: 'boolean', default: false, describe: 'print the raw JSON' }),
  handler: async (argv) => {
    const { config } = await nodeContext(argv.config);
    const s = await agentStatus(config);
    if (argv.json) {
      console.log(JSON.stringify(s, null, 2));
      return;
    }
    console.log(`node ${s.node}: ${s.ready ? 'ready' : 'NOT READY'}${s.ovsReachable ? '' : ' (OVS unreachable)'}`);
    console.log(`  bridge ${s.bridge} (datapath ${s.datapath}${s.datapathWhy ? `, chosen by datapath: auto: ${s.datapathWhy}` : ', as configured'}), node IP ${s.nodeIP ?? '(none)'}`);
    if (s.gateway) console.log(`  gateway ${s.gateway.name} ofport ${s.gateway.ofport} mac ${s.gateway.mac}`);
    console.log(`  ${s.pods.length} Pod(s) attached`);
    if (s.memory) console.log(`  memory: RSS ${s.memory.rssMiB} MiB, JS heap ${s.memory.heapUsedMiB} of ${s.memory.heapTotalMiB} MiB, external ${s.memory.externalMiB} MiB${s.memory.quietCollections?.collections ? `; ${s.memory.quietCollections.collections} quiet collection(s), the last freed ${s.memory.quietCollections.lastFreedMiB} MiB` : ''}`);
    if (s.lastResync) {
      const r = s.lastResync;
      console.log(`  last resync ${r.at}: ${r.error ? `FAILED: ${r.error}` : r.repairs.length ? `repaired ${r.repairs.join('; ')}` : 'nothing to repair'}`);
    }
    if (s.chain) {
      const c = s.chain;
      console.log(`  CNI chain: ${c.state}${c.file ? ` (${c.confDir}/${c.file})` : ''}, re-chained ${c.rechains} time(s)${c.lastRechainAt ? `, last ${c.lastRechainAt}` : ''}${c.state !== 'chained' && c.lastError ? `: ${c.lastError}` : ''}`);
    }
    if (s.adoption) {
      const a = s.adoption;
      console.log(`  running Pods adopted: ${a.adopted}`);
      for (const u of a.unattached) console.log(`  NOT ENFORCED: ${u.pod} crosses no bridge (no policy applies): ${u.reason}`);
      if (a.unattached.length) process.exitCode = 1;
    }
    const enforcement = s.enforcement as {
      newPods?: { admitted: number; guardedPods: { pod: string; nodes: string[]; sinceMs: number }[]; isolatedPods?: { pod: string; why: string; sinceMs: number }[] };
      controlPlane?: EnforcerStatus['controlPlane'];
    } | undefined;
    const cp = enforcement?.controlPlane;
    if (cp) {
      // Not following is fail-closed (the last state stays) but changes made meanwhile do not reach this node.
      console.log(cp.connected
        ? `  policy source: sluice-controller ${cp.server}, following since ${cp.since} (${cp.enforcedPolicies} policies, ${cp.appliedToGroups} AppliedToGroups, ${cp.addressGroups} AddressGroups)${cp.held ? `; held: ${cp.held}` : ''}`
        : `  POLICY SOURCE UNREACHABLE: sluice-controller ${cp.server} since ${cp.since}: ${cp.reason ?? ''}; the state received last stays enforced`);
      if (!cp.connected) process.exitCode = 1;
      // Costs time, not safety: new Pods' agents ask this node directly instead.
      const r = cp.realizedReports;
      if (r && !r.connected) console.log(`  realized views not reported to the controller${r.lastError ? `: ${r.lastError}` : ''}; new Pods' agents ask this node directly meanwhile`);
    }
    const newPods = enforcement?.newPods;
    if (newPods) {
      console.log(`  new Pods admitted: ${newPods.admitted}`);
      // A guard is fail-closed but cuts the Pod off from those nodes' span Pods: worth an operator's look when it lasts.
      for (const g of newPods.guardedPods) console.log(`  GUARDED: ${g.pod} from the Pods of ${g.nodes.join(', ')} for ${Math.round(g.sinceMs / 1000)} s: those nodes have not confirmed they know its address (their agents: realizationPort)`);
      for (const i of newPods.isolatedPods ?? []) console.log(`  ISOLATED: ${i.pod} for ${Math.round(i.sinceMs / 1000)} s, every new connection dropped: ${i.why}`);
    }
    if (!s.ready) process.exitCode = 1;
  },
};
