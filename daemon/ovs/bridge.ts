/**
 * The bridge as OVSDB holds it, everything under `ovsRunDir` so a node's private OVS (the lab) and
 * the machine's OVS are addressed the same way: the per-Pod work (ports, their records, the
 * OpenFlow port numbers) on one OVSDB session and ovs-vswitchd's control socket, with no process
 * forked; the bridge, the gateway, the flow-table names and flow-restore-wait are read and, when
 * wrong, created or repaired over that session too, each change one transaction (no ovs-vsctl).
 * Every method converges and reports what it changed. The flows on the bridge are
 * ./flow-programmer.ts's.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { GATEWAY_OFPORT, TABLES } from '../flows/tables.js';
import { JsonRpcClosed } from './jsonrpc.js';
import { type Condition, type Operation, type OperationResult, OvsdbClient, OvsdbError, ovsMap, type Row } from './ovsdb.js';
import { closeUnixctlConnections, unixctl } from './unixctl.js';

export type Datapath = 'system' | 'netdev';

export interface OvsOptions {
  ovsRunDir: string;
  bridge: string;
  datapath: Datapath;
  log: Logger;
  /** Timeout (seconds) of each OVSDB transaction, OpenFlow exchange and ovs-ofctl command. */
  timeoutSec?: number;
}

export class OvsError extends Error {}

/** Ends a transaction that changes what ovs-vswitchd must apply: asks it to, and reads the target back. */
const NEXT_CFG: Operation[] = [
  { op: 'mutate', table: 'Open_vSwitch', where: [], mutations: [['next_cfg', '+=', 1]] },
  { op: 'select', table: 'Open_vSwitch', where: [], columns: ['next_cfg'] },
];

/** external_ids of a Pod port (on its Interface row): everything needed to rebuild its flows. */
export interface PodPortIds {
  'sluice-type': 'container';
  'container-id': string;
  'pod-namespace': string;
  'pod-name': string;
  /** Comma-separated IPv4 addresses. */
  'ip-address': string;
  /** MAC of the Pod's own interface. */
  'attached-mac': string;
  'net-ns': string;
  'if-name': string;
  /** The Pod's IPv4 egress port (see EgressPortIds): its host veth, address, Pod-side MAC and interface. */
  'egress-v4-veth'?: string;
  'egress-v4-ip'?: string;
  'egress-v4-mac'?: string;
  'egress-v4-if-name'?: string;
}

/** external_ids of a Pod's IPv4 egress port; the Pod's own port records the rest. */
export interface EgressPortIds {
  'sluice-type': 'container-egress-v4';
  'container-id': string;
  'pod-namespace': string;
  'pod-name': string;
  'ip-address': string;
  'attached-mac': string;
}

export interface PodPortRecord {
  name: string;
  /** -1 when OVS could not attach the interface (e.g. the veth is gone). */
  ofport: number;
  ids: PodPortIds;
  error?: string;
}

export interface GatewayInfo {
  name: string;
  ofport: number;
  mac: string;
}

/** OVSDB refused a transaction because a Port or Interface of that name exists (their names are unique indexes). */
const isNameTaken = (err: Error): boolean => /constraint violation/.test(err.message) && /index on column "name"/.test(err.message);

/** A one-element OVSDB set is printed as the bare element. */
const asSet = (v: unknown): unknown[] => (Array.isArray(v) ? v : v === undefined || v === null ? [] : [v]);
const scalar = (v: unknown): unknown => (Array.isArray(v) ? v[0] : v);
const asString = (v: unknown): string => {
  const s = scalar(v);
  return typeof s === 'string' ? s : '';
};
const asNumber = (v: unknown): number => {
  const s = scalar(v);
  return typeof s === 'number' ? s : -1;
};

/**
 * Mutations that set `keys` in map column `column`, whatever they held: a map insert keeps a key's
 * old value, so the keys are deleted first.
 */
const setKeys = (column: string, keys: Record<string, string>): [string, string, unknown][] => [
  [column, 'delete', ['set', Object.keys(keys)]],
  [column, 'insert', ovsMap(keys)],
];

export function randomGatewayMac(): string {
  const b = randomBytes(6);
  b[0] = (b[0]! & 0xfe) | 0x02; // unicast, locally administered
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

/**
 * ovs-vswitchd's control socket from its pid file (pure): `<runDir>/ovs-vswitchd.<pid>.ctl`.
 * ovs-appctl's own lookup (`-t ovs-vswitchd`) also checks that the pid is alive, which fails
 * when ovs-vswitchd runs in another PID namespace than the caller (the DaemonSet's ovs container
 * next to the agent container): the pid in the file is the one ovs-vswitchd saw, and so is the
 * socket's name. undefined without a pid: ovs-appctl then looks it up itself.
 */
export function vswitchdControlSocket(ovsRunDir: string, pidFile: string | undefined): string | undefined {
  const pid = pidFile?.trim();
  return pid && /^\d+$/.test(pid) ? join(ovsRunDir, `ovs-vswitchd.${pid}.ctl`) : undefined;
}

/** An ovs-appctl command to the ovs-vswitchd of `ovsRunDir`, over its control socket (no process forked). */
export async function vswitchdAppctl(ovsRunDir: string, args: string[], timeoutMs: number): Promise<string> {
  const pid = await readFile(join(ovsRunDir, 'ovs-vswitchd.pid'), 'utf8').catch(() => undefined);
  const target = vswitchdControlSocket(ovsRunDir, pid);
  if (!target) throw new OvsError(`ovs-appctl ${args.join(' ')}: no ovs-vswitchd.pid in ${ovsRunDir} (is ovs-vswitchd running?)`);
  const [command, ...rest] = args;
  try {
    return await unixctl(target, command!, rest, timeoutMs);
  } catch (err) {
    throw new OvsError(`ovs-appctl ${args.join(' ')}: ${(err as Error).message}`);
  }
}

/** One bridge's OVSDB records (bridge, table names, gateway, Pod ports) and its ovs-vswitchd's control socket. */
export class OvsBridge {
  readonly db: string;
  private readonly timeout: number;
  private readonly ovsdb: OvsdbClient;

  constructor(readonly opts: OvsOptions) {
    this.db = `unix:${opts.ovsRunDir}/db.sock`;
    this.timeout = opts.timeoutSec ?? 15;
    this.ovsdb = new OvsdbClient(join(opts.ovsRunDir, 'db.sock'), { timeoutMs: this.timeout * 1000 });
  }

  /** Ends the OVSDB session and the kept control-socket connections (the agent's shutdown); a later call opens new ones. */
  close(): void {
    this.ovsdb.close();
    closeUnixctlConnections();
  }

  /** OVSDB errors and an unreachable server as OvsError, naming what was being done. */
  private async transact(what: string, ops: Parameters<OvsdbClient['transact']>[0]) {
    try {
      return await this.ovsdb.transact(ops);
    } catch (err) {
      if (err instanceof OvsdbError || err instanceof JsonRpcClosed) throw new OvsError(`${what}: ${err.message}`);
      throw err;
    }
  }

  private async select(what: string, table: string, where: Condition[], columns: string[]): Promise<Row[]> {
    try {
      return await this.ovsdb.select(table, where, columns);
    } catch (err) {
      if (err instanceof OvsdbError || err instanceof JsonRpcClosed) throw new OvsError(`${what}: ${err.message}`);
      throw err;
    }
  }

  /**
   * `ops` and the request that ovs-vswitchd apply them, in one transaction; waitForCfg then waits
   * until it has (what ovs-vsctl does after a change unless --no-wait): afterwards a new port has
   * its OpenFlow number, a removed one is gone from the datapath.
   */
  private change(what: string, ops: Operation[]): Promise<OperationResult[]> {
    return this.transact(what, [...ops, ...NEXT_CFG]);
  }

  /**
   * Interface `name` (with the columns of `iface`) and its Port, added to the bridge in one change,
   * as ovs-vsctl add-port builds them.
   */
  private async insertPort(what: string, name: string, iface: Row): Promise<OperationResult[]> {
    const br = this.opts.bridge;
    const changed = await this.change(what, [
      { op: 'insert', table: 'Interface', 'uuid-name': 'iface', row: { name, ...iface } },
      { op: 'insert', table: 'Port', 'uuid-name': 'port', row: { name, interfaces: ['named-uuid', 'iface'] } },
      { op: 'mutate', table: 'Bridge', where: [['name', '==', br]], mutations: [['ports', 'insert', ['set', [['named-uuid', 'port']]]]] },
    ]);
    // Not an error in OVSDB: nothing matched. The new rows are then unreferenced and dropped.
    if (changed[2]?.count !== 1) throw new OvsError(`${what}: bridge ${br} does not exist`);
    return changed;
  }

  /**
   * Waits until ovs-vswitchd applied the configuration a transaction ending with NEXT_CFG asked
   * for: one OVSDB "wait" operation that ovsdb-server answers once cur_cfg reaches it (no
   * polling), followed in the same transaction by `then` (read what vswitchd wrote), whose
   * results it returns.
   */
  private async waitForCfg(what: string, changed: OperationResult[], then: Operation[] = []): Promise<OperationResult[]> {
    const target = Number(changed.at(-1)?.rows?.[0]?.next_cfg);
    if (!Number.isFinite(target)) throw new OvsError(`${what}: OVSDB returned no next_cfg`);
    // Shorter than the session's own request timeout, so the wait's expiry is what reports it.
    const timeout = Math.max(0, this.timeout * 1000 - 1000);
    try {
      const [, ...rest] = await this.transact(what, [
        { op: 'wait', table: 'Open_vSwitch', where: [['cur_cfg', '>=', target]], columns: ['cur_cfg'], until: '!=', rows: [], timeout },
        ...then,
      ]);
      return rest;
    } catch (err) {
      if (err instanceof OvsError && /timed out/.test(err.message)) throw new OvsError(`${what}: ovs-vswitchd did not apply the change within ${this.timeout} s (is it running?)`);
      throw err;
    }
  }

  get bridge(): string {
    return this.opts.bridge;
  }

  /**
   * Ends ovs-vswitchd's flow-restore-wait once the bridge holds the agent's flows. The ovs container
   * sets it when it restarts ovs-vswitchd over an existing bridge: the kernel datapath then keeps
   * forwarding with the flows it has (Pods keep their connectivity and their policy) instead of
   * being flushed, until this says the OpenFlow tables are complete again. Returns whether it was set.
   */
  async endFlowRestoreWait(): Promise<boolean> {
    const what = 'end flow-restore-wait';
    const [row] = await this.select(what, 'Open_vSwitch', [], ['other_config']);
    if ((row?.other_config as Record<string, string> | undefined)?.['flow-restore-wait'] !== 'true') return false;
    // ovs-vswitchd follows other_config through its own monitor: no next_cfg round is needed.
    await this.transact(what, [{ op: 'mutate', table: 'Open_vSwitch', where: [], mutations: [['other_config', 'delete', ['set', ['flow-restore-wait']]]] }]);
    return true;
  }

  /** An ovs-appctl command to ovs-vswitchd, over its control socket (no process forked). */
  appctl(args: string[]): Promise<string> {
    return vswitchdAppctl(this.opts.ovsRunDir, args, this.timeout * 1000);
  }

  /** The datapath's conntrack entries of one zone (`dpctl/dump-conntrack` text). */
  dumpConntrack(zone: number): Promise<string> {
    return this.appctl(['dpctl/dump-conntrack', `zone=${zone}`]);
  }

  /** Removes the conntrack entry of one zone with this original-direction tuple (`dpctl/flush-conntrack`). */
  async flushConntrack(zone: number, tuple: string): Promise<void> {
    await this.appctl(['dpctl/flush-conntrack', `zone=${zone}`, tuple]);
  }

  /** Fails with a message saying where OVSDB was expected when it does not answer. */
  async ping(): Promise<void> {
    try {
      await this.select('read the Open_vSwitch row', 'Open_vSwitch', [], ['_uuid']);
    } catch (err) {
      throw new OvsError(`cannot reach OVSDB at ${this.db} (is ovsdb-server running with ovsRunDir ${this.opts.ovsRunDir}?): ${(err as Error).message}`);
    }
  }

  /** Creates or adopts the bridge: datapath, fail-mode secure, OpenFlow 1.5, named tables. */
  async ensureBridge(): Promise<string[]> {
    const br = this.opts.bridge;
    const found = await this.select(`look up bridge ${br}`, 'Bridge', [['name', '==', br]], ['name', 'datapath_type', 'fail_mode', 'protocols', 'flow_tables']);
    const changes: string[] = [];
    const want = { datapath_type: this.opts.datapath, fail_mode: 'secure', protocols: ['OpenFlow15'] };
    const cur = found[0];
    if (!cur) changes.push(`created bridge ${br} (datapath ${this.opts.datapath})`);
    else {
      if (asString(cur.datapath_type) !== want.datapath_type) changes.push(`datapath_type ${asString(cur.datapath_type) || '(default)'} -> ${want.datapath_type}`);
      if (asString(cur.fail_mode) !== 'secure') changes.push(`fail_mode ${asString(cur.fail_mode) || '(standalone)'} -> secure`);
      const protos = asSet(cur.protocols).map(String);
      if (protos.length !== 1 || protos[0] !== 'OpenFlow15') changes.push(`protocols [${protos.join(',')}] -> OpenFlow15`);
    }
    if (changes.length) {
      const what = `set up bridge ${br}`;
      const settings = { datapath_type: want.datapath_type, fail_mode: 'secure', protocols: ['set', want.protocols] };
      let changed: OperationResult[];
      if (!cur) {
        // As ovs-vsctl add-br: the bridge, its local internal port of the same name, and the
        // bridge in the root row's list.
        changed = await this.change(what, [
          { op: 'insert', table: 'Interface', 'uuid-name': 'local', row: { name: br, type: 'internal' } },
          { op: 'insert', table: 'Port', 'uuid-name': 'localport', row: { name: br, interfaces: ['named-uuid', 'local'] } },
          { op: 'insert', table: 'Bridge', 'uuid-name': 'br', row: { name: br, ports: ['named-uuid', 'localport'], external_ids: ovsMap({ 'sluice-managed': 'true' }), ...settings } },
          { op: 'mutate', table: 'Open_vSwitch', where: [], mutations: [['bridges', 'insert', ['set', [['named-uuid', 'br']]]]] },
        ]);
      } else {
        changed = await this.change(what, [
          { op: 'update', table: 'Bridge', where: [['name', '==', br]], row: settings },
          { op: 'mutate', table: 'Bridge', where: [['name', '==', br]], mutations: setKeys('external_ids', { 'sluice-managed': 'true' }) },
        ]);
      }
      await this.waitForCfg(what, changed);
    }
    if (await this.ensureTableNames()) changes.push('named the pipeline tables');
    return changes;
  }

  /**
   * Removes a bridge with its ports and their flows (uninstall); false when there was none. As
   * ovs-vsctl del-br: the bridge leaves the root row's list, and OVSDB drops it, its ports and
   * interfaces, which no other row references.
   */
  async deleteBridge(name: string): Promise<boolean> {
    const what = `remove bridge ${name}`;
    const [bridge] = await this.select(what, 'Bridge', [['name', '==', name]], ['_uuid']);
    if (!bridge) return false;
    const changed = await this.change(what, [
      { op: 'mutate', table: 'Open_vSwitch', where: [], mutations: [['bridges', 'delete', ['set', [['uuid', String(bridge._uuid)]]]]] },
    ]);
    await this.waitForCfg(what, changed);
    return true;
  }

  /** Registers TABLES as Flow_Table names so ovs-ofctl --names and ofproto/trace print them. */
  private async ensureTableNames(): Promise<boolean> {
    const br = this.opts.bridge;
    const tables = await this.select('list flow tables', 'Flow_Table', [], ['_uuid', 'name']);
    const nameOf = new Map(tables.map((r) => [asString(r._uuid), asString(r.name)]));
    const [bridge] = await this.select(`look up bridge ${br}`, 'Bridge', [['name', '==', br]], ['flow_tables']);
    const current = (bridge?.flow_tables ?? {}) as Record<string, unknown>;
    const same =
      Object.keys(current).length === TABLES.length && TABLES.every((name, i) => nameOf.get(asString(current[String(i)])) === name);
    if (same) return false;
    // The whole map replaced at once; the Flow_Table rows it no longer references are not root
    // rows, so OVSDB drops them.
    await this.transact(`name the flow tables of ${br}`, [
      ...TABLES.map((name, i): Operation => ({ op: 'insert', table: 'Flow_Table', 'uuid-name': `t${i}`, row: { name } })),
      { op: 'update', table: 'Bridge', where: [['name', '==', br]], row: { flow_tables: ['map', TABLES.map((_n, i) => [i, ['named-uuid', `t${i}`]])] } },
    ]);
    return true;
  }

  /**
   * Creates or adopts the gateway internal port. Its MAC is kept in Interface.mac so it survives
   * agent and OVS restarts (a MAC change would strand the host's neighbour entries).
   */
  async ensureGateway(name: string): Promise<{ gateway: GatewayInfo; changes: string[] }> {
    const br = this.opts.bridge;
    const changes: string[] = [];
    let cur = await this.findInterface(name);
    if (cur) {
      const onBridge = await this.bridgeOfPort(name);
      if (onBridge && onBridge !== br) throw new OvsError(`${name} exists on bridge ${onBridge}, not ${br}: remove it or choose another gateway name`);
      if (asString(cur.type) !== 'internal') throw new OvsError(`${name} exists in OVSDB with type "${asString(cur.type)}", expected an internal port`);
    }
    const persistedMac = cur ? asString(cur.mac) : '';
    const mac = persistedMac || (cur ? asString(cur.mac_in_use) : '') || randomGatewayMac();
    const ids = (cur?.external_ids ?? {}) as Record<string, string>;
    if (!cur || !persistedMac || ids['sluice-type'] !== 'gateway') {
      const what = `set up gateway ${name} on ${br}`;
      const settings = { type: 'internal', ofport_request: GATEWAY_OFPORT, mac };
      const changed = cur
        ? await this.change(what, [
            { op: 'update', table: 'Interface', where: [['name', '==', name]], row: settings },
            { op: 'mutate', table: 'Interface', where: [['name', '==', name]], mutations: setKeys('external_ids', { 'sluice-type': 'gateway' }) },
          ])
        : await this.insertPort(what, name, { external_ids: ovsMap({ 'sluice-type': 'gateway' }), ...settings });
      await this.waitForCfg(what, changed);
      changes.push(cur ? `adopted gateway ${name} (mac ${mac})` : `created gateway ${name} (mac ${mac})`);
      cur = await this.findInterface(name);
    }
    const ofport = asNumber(cur?.ofport);
    if (ofport < 1) throw new OvsError(`gateway ${name} has no OpenFlow port: ${asString(cur?.error) || 'ovs-vswitchd did not attach it'}`);
    return { gateway: { name, ofport, mac }, changes };
  }

  /** Read-only look-up of the gateway (troubleshooting tools must not change anything). */
  async findGateway(name: string): Promise<GatewayInfo | undefined> {
    const cur = await this.findInterface(name);
    if (!cur) return undefined;
    return { name, ofport: asNumber(cur.ofport), mac: asString(cur.mac) || asString(cur.mac_in_use) };
  }

  /** The bridge that has a port named `name` ('' when none does). */
  private async bridgeOfPort(name: string): Promise<string> {
    const what = `find the bridge of port ${name}`;
    const [port] = await this.select(what, 'Port', [['name', '==', name]], ['_uuid']);
    if (!port) return '';
    const [bridge] = await this.select(what, 'Bridge', [['ports', 'includes', ['uuid', String(port._uuid)]]], ['name']);
    return bridge ? asString(bridge.name) : '';
  }

  private async findInterface(name: string): Promise<Record<string, unknown> | undefined> {
    return (await this.select(`look up interface ${name}`, 'Interface', [['name', '==', name]], ['name', 'type', 'ofport', 'mac', 'mac_in_use', 'external_ids', 'error']))[0];
  }

  /**
   * Attaches (or re-labels) a Pod's host veth; returns its OpenFlow port number. `ofportRequest`
   * asks OVS for that number (honoured when free), so flows for the port can go in before it.
   */
  async addPodPort(name: string, ids: PodPortIds | EgressPortIds, ofportRequest?: number): Promise<number> {
    const what = `attach ${name} to ${this.opts.bridge}`;
    const request = ofportRequest !== undefined ? { ofport_request: ofportRequest } : {};
    // A new port (every ADD) is inserted without looking first: Port and Interface names are unique
    // indexes, so an existing one (a repeated ADD, a resync) makes OVSDB refuse the whole
    // transaction, and only then is it looked up and re-labelled. The change and the request that
    // ovs-vswitchd apply it go in one transaction.
    let changed: OperationResult[];
    try {
      changed = await this.insertPort(what, name, { external_ids: ovsMap({ ...ids }), ...request });
    } catch (err) {
      if (!(err instanceof OvsError && isNameTaken(err))) throw err;
      changed = await this.relabelPort(what, name, ids, request);
    }
    const [read] = await this.waitForCfg(what, changed, [{ op: 'select', table: 'Interface', where: [['name', '==', name]], columns: ['ofport', 'error'] }]);
    const cur = read?.rows?.[0];
    const ofport = asNumber(cur?.ofport);
    if (ofport < 1) throw new OvsError(`OVS could not attach ${name}: ${asString(cur?.error) || 'no OpenFlow port assigned'}`);
    return ofport;
  }

  /** addPodPort of a name OVSDB already has: it must be a port of the bridge; its other external_ids stay, ours are set. */
  private async relabelPort(what: string, name: string, ids: PodPortIds | EgressPortIds, request: { ofport_request?: number }): Promise<OperationResult[]> {
    const br = this.opts.bridge;
    const [found] = await this.select(what, 'Interface', [['name', '==', name]], ['_uuid', 'external_ids']);
    const [port] = found ? await this.select(what, 'Port', [['interfaces', 'includes', ['uuid', String(found._uuid)]]], ['_uuid']) : [];
    const [bridge] = await this.select(what, 'Bridge', [['name', '==', br]], ['ports']);
    if (!bridge) throw new OvsError(`${what}: bridge ${br} does not exist`);
    if (!found || !port || !(bridge.ports as string[]).includes(String(port._uuid))) throw new OvsError(`${what}: interface ${name} exists in OVSDB but not as a port of ${br}`);
    const merged = { ...(found.external_ids as Record<string, string>), ...ids };
    return this.change(what, [{ op: 'update', table: 'Interface', where: [['_uuid', '==', ['uuid', String(found._uuid)]]], row: { external_ids: ovsMap(merged), ...request } }]);
  }

  /** The lowest OpenFlow port number above every number an interface has or has requested. */
  async freeOfport(): Promise<number> {
    const used = (await this.select('choose an OpenFlow port number', 'Interface', [], ['ofport', 'ofport_request'])).flatMap((r) => [asNumber(r.ofport), asNumber(r.ofport_request)]);
    const max = Math.max(0, ...used.filter((n) => n > 0 && n < GATEWAY_OFPORT));
    if (max + 1 >= GATEWAY_OFPORT) throw new OvsError(`no free OpenFlow port number below the gateway's (${GATEWAY_OFPORT})`);
    return max + 1;
  }

  /** Removes a port from the bridge (nothing to do when there is none by that name). */
  async removePort(name: string): Promise<void> {
    const what = `remove port ${name} from ${this.opts.bridge}`;
    const [port] = await this.select(what, 'Port', [['name', '==', name]], ['_uuid']);
    if (!port) return;
    const changed = await this.change(what, [{ op: 'mutate', table: 'Bridge', where: [['name', '==', this.opts.bridge]], mutations: [['ports', 'delete', ['set', [['uuid', String(port._uuid)]]]]] }]);
    await this.waitForCfg(what, changed);
  }

  /** Attaches a Pod's IPv4 egress veth (a second port of the Pod); returns its OpenFlow port number. */
  addEgressPort(name: string, ids: EgressPortIds, ofportRequest?: number): Promise<number> {
    return this.addPodPort(name, ids, ofportRequest);
  }

  /** The IPv4 egress ports sluice attached (external_ids:sluice-type=container-egress-v4): name -> OpenFlow port. */
  async egressPortOfports(): Promise<Map<string, number>> {
    const found = await this.select('list Pod egress ports', 'Interface', [['external_ids', 'includes', ovsMap({ 'sluice-type': 'container-egress-v4' })]], ['name', 'ofport']);
    return new Map(found.map((r) => [asString(r.name), asNumber(r.ofport)]));
  }

  /** Every Pod port sluice attached (identified by external_ids:sluice-type=container). */
  async listPodPorts(): Promise<PodPortRecord[]> {
    const found = await this.select('list Pod ports', 'Interface', [['external_ids', 'includes', ovsMap({ 'sluice-type': 'container' })]], ['name', 'ofport', 'external_ids', 'error']);
    return found
      .map((r) => ({
        name: asString(r.name),
        ofport: asNumber(r.ofport),
        ids: r.external_ids as PodPortIds,
        ...(asString(r.error) ? { error: asString(r.error) } : {}),
      }))
      .sort((a, b) => a.name.localeCompare(b.name));
  }
}
