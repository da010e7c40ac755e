/**
 * An OVSDB client (RFC 7047) on one long-lived session to ovsdb-server's Unix socket: `transact`
 * with the operations' errors surfaced as OVSDB reports them, reconnecting on the next call after
 * the server went away (a restart of the ovs container), so the agent forks no ovs-vsctl for its
 * per-Pod work. Values use the protocol's own encoding (atoms, ["set", …], ["map", …],
 * ["uuid", …]); `decodeValue` turns them into plain values.
 */
import { JsonRpcClosed, JsonRpcConnection, JsonRpcError } from './jsonrpc.js';

export type OvsdbValue = string | number | boolean | ['uuid' | 'named-uuid', string] | ['set', unknown[]] | ['map', [unknown, unknown][]];
export type Condition = [string, '==' | '!=' | 'includes' | 'excludes' | '<' | '<=' | '>' | '>=', unknown];
export type Row = Record<string, unknown>;

export type Operation =
  | { op: 'select'; table: string; where: Condition[]; columns?: string[] }
  | { op: 'insert'; table: string; row: Row; 'uuid-name'?: string }
  | { op: 'update'; table: string; where: Condition[]; row: Row }
  | { op: 'mutate'; table: string; where: Condition[]; mutations: [string, string, unknown][] }
  | { op: 'delete'; table: string; where: Condition[] }
  /** Holds the transaction until the selected rows are (==) or are not (!=) `rows`, at most `timeout` ms. */
  | { op: 'wait'; table: string; where: Condition[]; columns: string[]; until: '==' | '!='; rows: Row[]; timeout?: number }
  | { op: 'comment'; comment: string };

export interface OperationResult {
  rows?: Row[];
  count?: number;
  uuid?: ['uuid', string];
  error?: string;
  details?: string;
}

export class OvsdbError extends Error {
  override name = 'OvsdbError';
}

/** Plain value of an OVSDB cell: maps as objects, sets as arrays, uuids as strings. */
export function decodeValue(v: unknown): unknown {
  if (Array.isArray(v) && v.length === 2 && typeof v[0] === 'string') {
    const [kind, body] = v as [string, unknown];
    if (kind === 'map') return Object.fromEntries((body as [unknown, unknown][]).map(([k, x]) => [String(decodeValue(k)), decodeValue(x)]));
    if (kind === 'set') return (body as unknown[]).map(decodeValue);
    if (kind === 'uuid' || kind === 'named-uuid') return body;
  }
  return v;
}

export const ovsMap = (o: Record<string, string>): ['map', [string, string][]] => ['map', Object.entries(o)];

/** Checks a transaction's results: the first failing operation, named, with OVSDB's error and details. */
export function transactionError(ops: Operation[], results: (OperationResult | null)[]): string | undefined {
  for (let i = 0; i < results.length; i++) {
    const r = results[i];
    if (!r?.error) continue;
    const op = ops[i];
    const what = op ? `operation ${i} (${op.op}${'table' in op ? ` ${op.table}` : ''})` : 'commit';
    return `${what}: ${r.error}${r.details ? `: ${r.details}` : ''}`;
  }
  return undefined;
}

export class OvsdbClient {
  private conn?: Promise<JsonRpcConnection> | undefined;

  constructor(
    readonly socketPath: string,
    private readonly opts: { database?: string; timeoutMs?: number } = {},
  ) {}

  private get database(): string {
    return this.opts.database ?? 'Open_vSwitch';
  }

  /** The session, opened on first use and again after the server closed it. */
  private connection(): Promise<JsonRpcConnection> {
    if (!this.conn) {
      const p = JsonRpcConnection.connect(this.socketPath, this.opts.timeoutMs ?? 5000);
      this.conn = p;
      p.then(
        (c) => void c.closed.then(() => this.conn === p && (this.conn = undefined)),
        () => this.conn === p && (this.conn = undefined),
      );
    }
    return this.conn;
  }

  /**
   * One atomic transaction. Throws OvsdbError naming the failing operation and OVSDB's text, or
   * JsonRpcClosed when the server is unreachable (the transaction then may not have run).
   */
  async transact(ops: Operation[]): Promise<OperationResult[]> {
    const conn = await this.connection().catch((err: Error) => {
      throw new JsonRpcClosed(`cannot reach OVSDB at unix:${this.socketPath} (is ovsdb-server running?): ${err.message}`);
    });
    let results: (OperationResult | null)[];
    try {
      results = (await conn.request('transact', [this.database, ...ops], this.opts.timeoutMs ?? 15_000)) as (OperationResult | null)[];
    } catch (err) {
      if (err instanceof JsonRpcError) throw new OvsdbError(`OVSDB transact: ${err.message}`);
      throw err;
    }
    const error = transactionError(ops, results);
    if (error) throw new OvsdbError(`OVSDB transact: ${error}`);
    return results as OperationResult[];
  }

  /** Rows of one select, decoded. */
  async select(table: string, where: Condition[], columns?: string[]): Promise<Row[]> {
    const [r] = await this.transact([{ op: 'select', table, where, ...(columns ? { columns } : {}) }]);
    return (r?.rows ?? []).map((row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, decodeValue(v)])));
  }

  close(): void {
    void this.conn?.then((c) => c.close(), () => undefined);
    this.conn = undefined;
  }
}
