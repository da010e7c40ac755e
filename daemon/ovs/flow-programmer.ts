/**
 * The flow side of the bridge: sluice's flows programmed and read back by cookie. Flows go over
 * the agent's OpenFlow connection to the bridge's management socket once useOpenFlow() is called
 * (the agent always does, before its first flow sync); the tools that construct a FlowProgrammer
 * without one (sluicectl, the lab) fork ovs-ofctl instead. The bridge itself, its ports and the
 * gateway are OVSDB's business (./bridge.ts).
 */
import { performance } from 'node:perf_hooks';
import { execa } from 'execa';
import { type ApplyTimings, bundleText, type FlowDiff, isEmptyDiff, parseSluiceCookies } from '../flows/diff.js';
import { COOKIE_PREFIX, flowText, SLUICE_COOKIE_FILTER } from '../flows/flow.js';
import type { FlowSwitch } from '../flows/sync.js';
import { tableId, type TableName } from '../flows/tables.js';
import { OvsError, type OvsOptions, vswitchdAppctl } from './bridge.js';
import type { BundleEntry, OpenFlowController } from './openflow/controller.js';
import { encodeFlowAdd, encodeFlowDeleteByCookie, type FlowStatsFilter } from './openflow/flowmod.js';
import { parseFlowText } from './openflow/flowtext.js';
import { closeUnixctlConnections } from './unixctl.js';

/** sluice's cookies: prefix 0x51ce in the top 16 bits. */
const SLUICE_COOKIES: FlowStatsFilter = { cookie: BigInt(`0x${COOKIE_PREFIX}`) << 48n, cookieMask: 0xffffn << 48n };
const ALL_ONES_64 = 0xffffffffffffffffn;

/** A flow-mod adding one flow given as ovs-ofctl text (parsed now: a syntax error throws before anything is sent). */
export function addEntry(text: string): BundleEntry {
  const flow = parseFlowText(text);
  return { text, encode: (xid) => encodeFlowAdd(xid, flow) };
}

/** A flow-mod deleting every flow, in every table, whose cookie matches `cookie` under `mask`. */
export function deleteEntry(cookie: bigint, mask = ALL_ONES_64): BundleEntry {
  const text = `delete cookie=0x${cookie.toString(16)}/${mask === ALL_ONES_64 ? '-1' : `0x${mask.toString(16)}`}`;
  return { text, encode: (xid) => encodeFlowDeleteByCookie(xid, cookie, mask) };
}

/** sluice's flows on one bridge: applied as diffs, added and deleted by cookie, read back and counted. */
export class FlowProgrammer implements FlowSwitch {
  /** The bridge's OpenFlow management socket, as ovs-ofctl names it. */
  readonly target: string;
  private readonly timeout: number;
  private openflow?: OpenFlowController;

  constructor(readonly opts: OvsOptions) {
    this.target = `unix:${opts.ovsRunDir}/${opts.bridge}.mgmt`;
    this.timeout = opts.timeoutSec ?? 15;
  }

  /** Ends the control-socket connections the megaflow purges keep; a later purge opens new ones. */
  close(): void {
    closeUnixctlConnections();
  }

  /** ovs-ofctl against this bridge; refused once useOpenFlow() was called (the agent forks none). */
  async ofctl(args: string[], input?: string): Promise<string> {
    if (this.openflow) throw new OvsError(`ovs-ofctl ${args.join(' ')}: refused, flows of ${this.opts.bridge} go over the OpenFlow connection`);
    const r = await execa('ovs-ofctl', ['-O', 'OpenFlow15', `--timeout=${this.timeout}`, ...args], {
      reject: false,
      input: input ?? '',
    });
    if (r.exitCode !== 0) throw new OvsError(`ovs-ofctl ${args.join(' ')}: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
    return r.stdout;
  }

  /**
   * From now on every flow method goes over `controller` (the agent's connection to this bridge's
   * management socket), never through ovs-ofctl. A method called while it is not connected waits
   * for it up to the command timeout, then fails saying so.
   */
  useOpenFlow(controller: OpenFlowController): void {
    this.openflow = controller;
  }

  private async connected(what: string): Promise<OpenFlowController | undefined> {
    const c = this.openflow;
    if (!c || c.isConnected) return c;
    try {
      await c.waitConnected(this.timeout * 1000);
    } catch (err) {
      throw new OvsError(`${what}: ${(err as Error).message} (is ovs-vswitchd running with bridge ${this.opts.bridge}?)`);
    }
    return c;
  }

  /** Runs an OpenFlow exchange, its failures as OvsError naming what was being done. */
  private async over<T>(what: string, run: (c: OpenFlowController) => Promise<T>, ofctl: () => Promise<T>): Promise<T> {
    const c = await this.connected(what);
    if (!c) return ofctl();
    try {
      return await run(c);
    } catch (err) {
      throw new OvsError(`${what}: ${(err as Error).message}`);
    }
  }

  /** Cookies of sluice's installed flows. */
  async installedCookies(): Promise<string[]> {
    return this.over(
      'read the installed flows',
      async (c) => (await c.flowDesc(SLUICE_COOKIES)).map((f) => `0x${f.cookie.toString(16)}`),
      async () => parseSluiceCookies(await this.ofctl(['dump-flows', '--no-names', '--no-stats', this.target, SLUICE_COOKIE_FILTER])),
    );
  }

  /** How many of sluice's flows the bridge holds (one aggregate-statistics request, no flow listed). */
  async installedCount(): Promise<number> {
    return this.over(
      'count the installed flows',
      async (c) => (await c.aggregateStats(SLUICE_COOKIES)).flowCount,
      async () => Number(/flow_count=(\d+)/.exec(await this.ofctl(['dump-aggregate', this.target, SLUICE_COOKIE_FILTER]))?.[1] ?? Number.NaN),
    );
  }

  /**
   * sluice's flows of `tables` with their counters, one line per flow in ovs-ofctl's dump-flows
   * form (`cookie=0x…, table=N, n_packets=P, n_bytes=B`) as parseFlowCounters reads it.
   */
  async dumpCounters(tables: TableName[]): Promise<string> {
    return this.over(
      'read the flow counters',
      async (c) => {
        const lines: string[] = [];
        for (const t of tables) {
          for (const f of await c.flowDesc({ ...SLUICE_COOKIES, table: tableId(t) })) {
            lines.push(`cookie=0x${f.cookie.toString(16)}, table=${f.table}, n_packets=${f.packets ?? 0n}, n_bytes=${f.bytes ?? 0n}, priority=${f.priority}`);
          }
        }
        return lines.join('\n');
      },
      async () => {
        const out: string[] = [];
        for (const t of tables) out.push(await this.ofctl(['dump-flows', '--no-names', this.target, `table=${tableId(t)},${SLUICE_COOKIE_FILTER}`]));
        return out.join('\n');
      },
    );
  }

  /** Adds flows given as ovs-ofctl text, all or none (traceflow's observation flows). */
  async addFlows(texts: readonly string[]): Promise<void> {
    if (texts.length === 0) return;
    const entries = texts.map(addEntry);
    await this.over('add flows', (c) => c.flowBundle(entries), async () => {
      await this.ofctl(['--bundle', 'add-flows', this.target, '-'], `${texts.join('\n')}\n`);
    });
  }

  /** Deletes every flow whose cookie matches `cookie` under `mask`, in every table. */
  async deleteFlows(cookie: bigint, mask: bigint): Promise<void> {
    const filter = `cookie=0x${cookie.toString(16)}/0x${mask.toString(16)}`;
    await this.over(`delete flows ${filter}`, (c) => c.flowBundle([deleteEntry(cookie, mask)]), async () => {
      await this.ofctl(['del-flows', this.target, filter]);
    });
  }

  /** All flows of the bridge as ovs-ofctl prints them (names on), for troubleshooting. */
  async dumpFlows(extra: string[] = []): Promise<string> {
    return this.ofctl(['dump-flows', '--names', this.target, ...extra]);
  }

  /**
   * Commits the diff as one atomic OpenFlow bundle: its deletions (by exact cookie), then its additions. On
   * the userspace (netdev) datapath the cached megaflows are then purged (over ovs-vswitchd's
   * control socket, no process forked), so every packet after this call is decided by the new tables. Reason: when a change
   * alters a megaflow's actions, ovs-vswitchd's revalidator rewrites it by looking the datapath
   * flow up by key, not by flow id (dpif-netdev, OVS 3.1). If a wider megaflow overlaps a narrower
   * one (same source and destination, one for any protocol, one for TCP/80), the rewrite can land
   * on the wider one. The narrower one then keeps its old actions while the revalidator records
   * them as updated. An Allow then outlives the policy that removed it until the flow idles out
   * (seen in the model=datapath lab suites). The kernel datapath rewrites by flow id and needs no
   * purge. Resolves with the time the bundle and the purge took (ms).
   */
  async applyDiff(diff: FlowDiff): Promise<ApplyTimings> {
    if (isEmptyDiff(diff)) return { bundleMs: 0, purgeMs: 0 };
    const t0 = performance.now();
    // Deletions first: a replaced flow may keep its table/priority/match under a new cookie.
    const entries = [...diff.remove.map((c) => deleteEntry(BigInt(c))), ...diff.add.map((f) => addEntry(flowText(f)))];
    await this.over('apply flows', (c) => c.flowBundle(entries), async () => {
      await this.ofctl(['--bundle', 'add-flows', this.target, '-'], bundleText(diff));
    });
    const t1 = performance.now();
    if (this.opts.datapath === 'netdev') await vswitchdAppctl(this.opts.ovsRunDir, ['revalidator/purge'], this.timeout * 1000);
    return { bundleMs: Math.round(t1 - t0), purgeMs: Math.round(performance.now() - t1) };
  }
}
