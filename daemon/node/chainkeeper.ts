/**
 * Keeps sluice chained in the node's CNI configuration. A primary CNI rewrites its configuration
 * list without sluice (the AWS VPC CNI does on every aws-node start and upgrade), or a new file
 * sorts first; from then on new Pods are created by the primary alone and escape the bridge. The
 * keeper follows the directory (inotify through fs.watch, plus a periodic rescan because events can
 * be missed and writers replace files by rename) and re-chains the file the runtime uses, within a
 * fraction of a second, with an atomic rewrite (install/chainstate.ts decides, pure).
 *
 * It never writes when that could do harm: while the sluice-cni binary is missing from the CNI bin
 * directory (chaining it would make every ADD fail; `sluicectl cni uninstall` removes the binary
 * first, so an uninstall is not undone), when an unusable file sorts first (probably a primary's file
 * being replaced), or while a writer keeps undoing the chain (it backs off and says so).
 */
import { watch, type FSWatcher } from 'node:fs';
import { access } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { type Clock, type TimerHandle, every } from '../clock.js';
import { planChain } from '../../install/chainstate.js';
import { applyChainPlan, readConfDir } from '../../install/cni-install.js';
import { SLUICE_PLUGIN_TYPE } from '../../install/conflist.js';

export interface ChainKeeperOptions {
  confDir: string;
  binDir: string;
  /** sluice's entry in the configuration list (install/conflist.ts sluiceEntry). */
  entry: Record<string, unknown>;
  log: Logger;
  /** Rescans, the debounce and the back-off run on it. */
  clock: Clock;
  rescanMs?: number;
  debounceMs?: number;
  /** After a re-chain (Pods created meanwhile escaped the bridge). */
  onRechained?: (file: string) => void;
}

export interface ChainStatus {
  confDir: string;
  /** chained: the runtime's file chains sluice; waiting: no primary configuration yet; refused: see lastError. */
  state: 'starting' | 'chained' | 'waiting' | 'refused' | 'plugin-missing' | 'backing-off';
  file?: string;
  rechains: number;
  lastRechainAt?: string;
  lastError?: string;
}

/** More re-chains than this within WINDOW_MS: someone keeps undoing them; stop for BACKOFF_MS. */
const MAX_RECHAINS = 5;
const WINDOW_MS = 10_000;
const BACKOFF_MS = 30_000;

export class ChainKeeper {
  private watcher?: FSWatcher | undefined;
  private stopRescan?: (() => void) | undefined;
  private debounce?: TimerHandle | undefined;
  private running?: Promise<void> | undefined;
  private again = false;
  private closed = false;
  private recent: number[] = [];
  private backoffUntil = 0;
  private readonly st: ChainStatus;
  private lastLogged = '';

  constructor(private readonly opts: ChainKeeperOptions) {
    this.st = { confDir: opts.confDir, state: 'starting', rechains: 0 };
  }

  status(): ChainStatus {
    return { ...this.st };
  }

  /** First check now, then follow the directory. */
  async start(): Promise<void> {
    await this.check('start');
    if (this.closed) return;
    this.stopRescan = every(this.opts.clock, this.opts.rescanMs ?? 5000, () => this.schedule('rescan'));
    this.watch();
  }

  private watch(): void {
    if (this.watcher || this.closed) return;
    try {
      this.watcher = watch(this.opts.confDir, () => this.schedule('change'));
      this.watcher.on('error', () => {
        // The directory went away (or was replaced): the rescan watches it again when it is back.
        this.watcher?.close();
        this.watcher = undefined;
      });
    } catch {
      // Not there yet: the periodic rescan retries.
    }
  }

  private schedule(reason: string): void {
    if (this.closed) return;
    if (!this.watcher) this.watch();
    const { clock } = this.opts;
    clock.clearTimeout(this.debounce);
    this.debounce = clock.setTimeout(() => void this.check(reason), this.opts.debounceMs ?? 100);
  }

  /** One convergence pass; concurrent requests coalesce into one more pass. */
  check(reason: string): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        try {
          await this.converge(reason);
        } catch (err) {
          this.set('refused', undefined, `${this.opts.confDir}: ${(err as Error).message}`);
        }
      } while (this.again && !this.closed);
    })().finally(() => (this.running = undefined));
    return this.running;
  }

  private set(state: ChainStatus['state'], file: string | undefined, error?: string): void {
    this.st.state = state;
    if (file !== undefined) this.st.file = file;
    if (error !== undefined) this.st.lastError = error;
    const line = `${state}|${file ?? ''}|${error ?? ''}`;
    if (line === this.lastLogged) return;
    this.lastLogged = line;
    const fields = { confDir: this.opts.confDir, file, ...(error ? { why: error } : {}) };
    if (state === 'chained') this.opts.log.info(fields, 'cni chain: sluice is chained');
    else if (state === 'waiting') this.opts.log.info(fields, 'cni chain: no CNI configuration yet; waiting for the primary');
    else this.opts.log.warn(fields, `cni chain: ${state}; new Pods may escape the bridge until it is fixed`);
  }

  private async converge(reason: string): Promise<void> {
    const { clock } = this.opts;
    const now = clock.now();
    if (now < this.backoffUntil) return;
    const plan = planChain(await readConfDir(this.opts.confDir), this.opts.entry);
    if (plan.action === 'none') return this.set('waiting', undefined);
    if (plan.action === 'refuse') return this.set('refused', undefined, plan.why);
    if (plan.action === 'keep') return this.set('chained', plan.file);
    const binary = join(this.opts.binDir, SLUICE_PLUGIN_TYPE);
    if (!(await access(binary).then(() => true, () => false))) {
      return this.set('plugin-missing', plan.file, `${binary} is missing: not chaining a plugin the runtime cannot run`);
    }
    this.recent = [...this.recent.filter((t) => now - t < WINDOW_MS), now];
    if (this.recent.length > MAX_RECHAINS) {
      this.backoffUntil = now + BACKOFF_MS;
      this.recent = [];
      return this.set('backing-off', plan.file, `${plan.file} lost sluice ${MAX_RECHAINS + 1} times within ${WINDOW_MS / 1000} s: another writer keeps rewriting it; trying again in ${BACKOFF_MS / 1000} s`);
    }
    const t0 = clock.now();
    const written = await applyChainPlan(this.opts.confDir, plan);
    this.st.rechains++;
    this.st.lastRechainAt = new Date(clock.now()).toISOString();
    this.opts.log.warn({ file: written, was: plan.file, reason, ms: clock.now() - t0 }, 'cni chain: the CNI configuration did not chain sluice (rewritten by the primary, or a new file sorts first); chained it again');
    this.set('chained', plan.target);
    this.opts.onRechained?.(written);
  }

  close(): void {
    this.closed = true;
    this.stopRescan?.();
    this.opts.clock.clearTimeout(this.debounce);
    this.watcher?.close();
  }
}
