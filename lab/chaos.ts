#!/usr/bin/env node
/**
 * `npm run chaos [-- --quick] [-- --name NAME] [-- --policy-source standalone]`: faults injected into a 2-node enforcing lab (`chaos` unless --name says otherwise, ptp, the model
 * of test/scenarios/model.yaml with a default deny on namespace x) while traffic runs, and two
 * invariants checked all along:
 *
 *  - no stale allow: every 250 ms probers in z/a and z/b (one on each node) open new TCP connections
 *    on ports 80 and 81 to every Pod of x (denied) and to y/a and y/c (allowed); a denied one that
 *    succeeds is a gap (must be 0), an allowed one that fails is counted;
 *  - nothing lost: an allowed TCP connection (z/b -> y/b) writes every 20 ms through each scenario
 *    and must never be reset; after each scenario every node's bridge holds exactly the agent's
 *    desired flows and one port per attached Pod, every host route to a Pod address is an attached
 *    Pod's via the gateway, and the IPAM holds no address of a gone Pod (anything else is a leak).
 *
 * Policy churn runs through every scenario (a policy in x appearing and going away, a Pod relabelled:
 * flows recompiled, the probed verdicts unchanged). Scenarios, on x/a's node (the one enforcing the deny): its agent killed with SIGKILL at random
 * moments and started again (time to ready); its ovsdb-server and ovs-vswitchd killed and started
 * again (time until the bridge holds the agent's flows again); its iptables mangle and raw tables
 * flushed, and a Pod's host route moved back onto its veth, by another process (time to repair);
 * 40 Pods created at once and then deleted at once (time until all are attached and detached
 * again); a hostile Pod (z/c) sending to an allowed peer with another Pod's address and then with a
 * MAC it does not own (each such datagram that arrives counts as a gap; recovery: until it connects
 * again with its own); a policy storm (2 000 NetworkPolicies created, then deleted, while the labels
 * of 1 000 API-only Pods their peers select churn: agent memory, CPU time and realization p50/p99
 * printed; recovery: until the rules are back to what they were); a Pod blasting SYNs that a Reject rule answers through the agent (packet-ins
 * received and dropped printed; recovery: how long a Pod created during the flood takes to attach); every watch
 * stream cut with the history compacted, so watches get 410 Gone and relist (time until every agent
 * relisted and is synced); the API server unreachable (the lab supervisor stopped), then back (time until the
 * agents' watches are synced); the node's conflist rewritten without sluice while Pods are created
 * (time until sluice is chained again; every Pod of the window must end up attached); CNI calls in the orders a runtime can make them (chaos/cni-storm.ts:
 * ADDs at once, DEL during ADD, unknown DELs, repeated ADDs, sluice-cni killed mid-call; every
 * answer a result or a CNI error object, nothing half-attached); forged ARP and frames from or to
 * the re-entrance and virtual MACs (lab/forged-frames.py; what reaches a victim and poisoned
 * neighbour entries are gaps); a policy flipping a probed pair between allow and deny, the
 * probers' expectation following the agent's commit (recovery: API change -> enforcement); new Pods
 * talking from their first moment to a Pod that drops them and to one that admits them only (any
 * datagram of the first answered, or a first datagram of the second unanswered, is broken;
 * recovery: sandbox -> first answer) and a quarantine cutting a running flow (recovery: API change
 * -> its last datagram; chaos/edges-of-time.ts); as the agents follow sluice-controller (unless
 * `--policy-source standalone`), the controller killed and replaced, frozen, and its watches cut
 * past its history (chaos/controller-faults.ts); a soak
 * of steady churn sampling the agent's RSS and open descriptors (a descriptor leak is broken). The
 * BROKEN column counts the other broken promises (CNI answers outside the spec, half-attached
 * containers, a descriptor leak, a flip check that saw nothing). Prints one table and exits 1 when
 * an invariant broke. --quick runs each scenario briefly (about 3 minutes in all).
 *
 * The harness (lab/chaos/harness.ts) sets up the lab, runs each scenario under the probers, the
 * stream and the churn, checks for leaks and prints the table; each scenario is a file of
 * lab/chaos/, run in the order listed here.
 */
import { DEFAULT_POLICY_SOURCE } from './args.js';
import { checkLabName } from './net/names.js';
import { agentKill } from './chaos/agent-kill.js';
import { apiServerDown } from './chaos/apiserver-down.js';
import { cniStorm } from './chaos/cni-storm.js';
import { controllerFaults } from './chaos/controller-faults.js';
import { conflistRewrite } from './chaos/conflist-rewrite.js';
import { edgesOfTime } from './chaos/edges-of-time.js';
import { forgedFrames } from './chaos/forged-frames.js';
import { runChaos, type Scenario } from './chaos/harness.js';
import { hostRoute } from './chaos/host-route.js';
import { hostileSourceIp } from './chaos/hostile-source-ip.js';
import { iptablesFlush } from './chaos/iptables-flush.js';
import { ovsRestart } from './chaos/ovs-restart.js';
import { packetInFlood } from './chaos/packet-in-flood.js';
import { podStorm } from './chaos/pod-storm.js';
import { policyStorm } from './chaos/policy-storm.js';
import { soak } from './chaos/soak.js';
import { verdictFlips } from './chaos/verdict-flips.js';
import { watchRelist } from './chaos/watch-relist.js';

const QUICK = process.argv.includes('--quick');
/** `--name NAME`: the lab's name (its namespaces and state), so a run can sit beside another lab. */
const nameAt = process.argv.indexOf('--name');
const LAB = checkLabName(nameAt >= 0 ? (process.argv[nameAt + 1] ?? '') : 'chaos');
/**
 * `--only WORD`: only the scenarios whose name contains WORD (`--only soak` gives the soak the whole
 * 15 minutes, which the full run cannot fit beside the other scenarios).
 */
const onlyAt = process.argv.indexOf('--only');
/** The agents follow sluice-controller (the lab's default), whose faults are added; `--policy-source standalone`: each agent computes the cluster. */
const sourceAt = process.argv.indexOf('--policy-source');
const SOURCE = sourceAt >= 0 ? process.argv[sourceAt + 1] : DEFAULT_POLICY_SOURCE;
if (SOURCE !== 'standalone' && SOURCE !== 'controller') {
  console.error(`chaos: --policy-source "${SOURCE}": standalone or controller`);
  process.exit(2);
}
const ONLY = onlyAt >= 0 ? (process.argv[onlyAt + 1] ?? '') : undefined;

/** In this order: the table's rows, and the soak last so that it takes what is left of the full run's 20 minutes. */
const SCENARIOS: Scenario[] = [
  agentKill,
  ovsRestart,
  iptablesFlush,
  hostRoute,
  podStorm,
  conflistRewrite,
  cniStorm,
  hostileSourceIp,
  forgedFrames,
  edgesOfTime,
  verdictFlips,
  policyStorm,
  packetInFlood,
  watchRelist,
  apiServerDown,
  controllerFaults,
  soak,
];

runChaos({ quick: QUICK, lab: LAB, only: ONLY, policySource: SOURCE }, SCENARIOS).catch((err: Error) => {
  console.error(`chaos: ${err.message}`);
  process.exitCode = 2;
});
