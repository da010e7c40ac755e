/**
 * The agent's reports to the controller of the view versions its bridge enforces (the controller's
 * POST /realized-views, controller/realized-views.ts): one long request, a line per report. A new
 * Pod's agent then learns from the controller that this Node holds the Pod, instead of asking this
 * agent: one line per commit here answers for every new Pod the commit holds.
 *
 * Only the newest versions matter: a report replaces the ones before it, and one made while no
 * request is open is written when the next one opens. The request is ended and opened again every
 * `rotateMs` (a request is not meant to last forever: servers and proxies limit them), and after a
 * failure, 100 ms later doubling to 5 s. Nothing depends on the reports for safety: a Node whose
 * report has not reached the controller is asked directly by the new Pod's agent, or guarded from.
 */
import type { ClientRequest } from 'node:http';
import type { Logger } from 'pino';
import { type Clock, Pauses, realClock, type TimerHandle } from '../clock.js';
import { type ControllerAccess, openControllerStream } from './client.js';
import { REALIZED_VIEWS_PATH, type RealizedViewReport, type ViewVersions, viewVersionStrings } from './types.js';

export interface RealizedReporterOptions extends ControllerAccess {
  clock?: Clock;
  log?: Pick<Logger, 'info' | 'warn'>;
  /** How long one request lasts before it is ended and another opened (default 60 000 ms). */
  rotateMs?: number;
  /** First retry delay (default 100 ms), doubled per failure up to `maxBackoffMs` (default 5000 ms). */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
}

export interface RealizedReporterStatus {
  connected: boolean;
  /** Reports written, requests opened, failures to open or keep one. */
  sent: number;
  opened: number;
  failures: number;
  lastError?: string;
}

export class RealizedReporter {
  private readonly clock: Clock;
  private readonly pauses: Pauses;
  private readonly stopping = new AbortController();
  /** The newest report, as its line. */
  private latest: string | undefined;
  /** The open request and the last line written on it. */
  private req: ClientRequest | undefined;
  private written: string | undefined;
  private stopped = false;
  private running: Promise<void> | undefined;
  private readonly counts = { sent: 0, opened: 0, failures: 0 };
  private lastError: string | undefined;

  constructor(private readonly opts: RealizedReporterOptions) {
    this.clock = opts.clock ?? realClock;
    this.pauses = new Pauses(this.clock);
  }

  start(): void {
    if (this.running || this.stopped) throw new Error('realized-views reporter: start() called twice');
    this.running = this.run();
  }

  /** This Node's bridge enforces its view at `versions`, of the controller store `store`. */
  set(store: string, versions: ViewVersions): void {
    const report: RealizedViewReport = { store, versions: viewVersionStrings(versions) };
    const line = `${JSON.stringify(report)}\n`;
    if (line === this.latest) return;
    this.latest = line;
    this.flush();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort(new Error('stopped'));
    this.req?.destroy();
    this.pauses.close();
    await this.running;
  }

  status(): RealizedReporterStatus {
    return { connected: this.req !== undefined, ...this.counts, ...(this.lastError !== undefined ? { lastError: this.lastError } : {}) };
  }

  private flush(): void {
    const { req, latest } = this;
    if (!req || latest === undefined || latest === this.written || req.destroyed || req.writableEnded) return;
    req.write(latest);
    this.written = latest;
    this.counts.sent++;
  }

  private async run(): Promise<void> {
    const initial = this.opts.initialBackoffMs ?? 100;
    const max = this.opts.maxBackoffMs ?? 5000;
    let failures = 0;
    while (!this.stopped) {
      try {
        await this.session();
        failures = 0;
        continue;
      } catch (err) {
        if (this.stopped) return;
        const message = (err as Error).message;
        this.counts.failures++;
        if (message !== this.lastError) this.opts.log?.warn({ err: message }, 'realized-views reports: the controller is not told what this node enforces; new Pods\' agents ask this one directly meanwhile');
        this.lastError = message;
      }
      await this.pauses.sleep(Math.min(max, initial * 2 ** failures++));
    }
  }

  /** One request: open, write the newest report, and last until rotated or ended; rejects when it fails. */
  private async session(): Promise<void> {
    const { req, res } = await openControllerStream(this.opts, REALIZED_VIEWS_PATH, this.stopping.signal);
    if (this.stopped) {
      req.destroy();
      return;
    }
    this.req = req;
    this.written = undefined;
    this.counts.opened++;
    if (this.lastError !== undefined) this.opts.log?.info({}, 'realized-views reports: the controller is told again what this node enforces');
    this.lastError = undefined;
    this.flush();
    let timer: TimerHandle | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        timer = this.clock.setTimeout(() => req.end(), this.opts.rotateMs ?? 60_000);
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          if (body.length < 1000) body += c;
        });
        // A clean end (rotated here, or ended by the controller: it stopped leading) opens
        // another at once; a Status says this request was refused.
        res.on('end', () => {
          let refused: string | undefined;
          try {
            const o = JSON.parse(body) as { kind?: unknown; message?: unknown };
            if (o.kind === 'Status') refused = String(o.message);
          } catch {
            // Counts, or nothing: a clean end.
          }
          if (refused !== undefined) reject(new Error(`controller ${this.opts.server}: the reports were refused: ${refused}`));
          else resolve();
        });
        // A connection lost inside the response: 'error' (ECONNRESET, "aborted"), then 'close'.
        res.on('error', (err) => reject(new Error(`controller ${this.opts.server}: the reports' connection: ${err.message}`)));
        res.on('close', () => {
          if (!res.complete) reject(new Error(`controller ${this.opts.server}: the reports' connection closed`));
        });
        req.on('error', (err) => reject(new Error(`controller ${this.opts.server}: ${err.message}`)));
      });
    } finally {
      this.clock.clearTimeout(timer);
      this.req = undefined;
      if (!req.writableEnded) req.destroy();
    }
  }
}
