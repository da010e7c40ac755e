/**
 * Background traffic from inside a lab Pod for the enforcement lab tests: a long-lived TCP stream
 * (echo server) whose progress is readable at any time, and a loop of new TCP connection attempts
 * that counts how many succeed (a denied destination must never be reached, even for a moment).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const SCRIPT = String.raw`
const net = require('node:net'); const fs = require('node:fs');
const [mode, ip, port, statusFile] = process.argv.slice(1);
const st = { mode, connected: 0, attempts: 0, echoed: 0, errors: [], closed: false };
const save = () => fs.writeFileSync(statusFile + '.tmp', JSON.stringify(st)) || fs.renameSync(statusFile + '.tmp', statusFile);
setInterval(save, 50);
process.on('SIGTERM', () => { save(); process.exit(0); });
if (mode === 'stream') {
  const s = net.connect({ host: ip, port: Number(port) }, () => { st.connected = 1; setInterval(() => s.write('x'.repeat(64) + '\n'), 50); });
  s.on('data', (d) => { st.echoed += d.length; });
  s.on('error', (e) => { st.errors.push(e.code || e.message); });
  s.on('close', () => { st.closed = true; });
} else {
  const once = () => {
    st.attempts++;
    const s = net.connect({ host: ip, port: Number(port) });
    const t = setTimeout(() => { s.destroy(); setTimeout(once, 10); }, 300);
    s.on('connect', () => { st.connected++; clearTimeout(t); s.destroy(); setTimeout(once, 10); });
    s.on('error', () => { clearTimeout(t); setTimeout(once, 10); });
  };
  once();
}
`;

export interface TrafficStatus {
  connected: number;
  attempts: number;
  echoed: number;
  errors: string[];
  closed: boolean;
}

/**
 * A node script run in a network namespace, keeping its JSON status in a file that can be read at
 * any time (the script rewrites it every 50 ms and on SIGTERM).
 */
export class NetnsScript<S> {
  private readonly child: ChildProcess;
  private readonly file = join(tmpdir(), `lab-script-${process.pid}-${Math.random().toString(36).slice(2)}.json`);

  constructor(netns: string, script: string, args: (statusFile: string) => string[], private readonly empty: S) {
    this.child = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', script, ...args(this.file)], { stdio: 'ignore' });
  }

  status(): S {
    try {
      return JSON.parse(readFileSync(this.file, 'utf8')) as S;
    } catch {
      return this.empty;
    }
  }

  /** Stops the script (its last status is written on SIGTERM) and returns that status. */
  async stop(): Promise<S> {
    if (this.child.exitCode === null) {
      const exited = new Promise((r) => this.child.once('exit', r));
      this.child.kill('SIGTERM');
      await exited;
    }
    const s = this.status();
    rmSync(this.file, { force: true });
    return s;
  }
}

export class Traffic extends NetnsScript<TrafficStatus> {
  constructor(netns: string, mode: 'stream' | 'attempts', ip: string, port: number) {
    super(netns, SCRIPT, (file) => [mode, ip, String(port), file], { connected: 0, attempts: 0, echoed: 0, errors: [], closed: false });
  }

  /** Waits until the stream is connected and has echoed something (node start-up in the netns can take seconds). */
  async started(timeoutMs = 20_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const s = this.status();
      if (s.echoed > 0 || s.attempts > 0) return true;
      if (s.closed) return false;
      await new Promise((r) => setTimeout(r, 50));
    }
    return false;
  }

  /** Waits until the stream echoed more than it had (it is alive now). */
  async progresses(timeoutMs = 3000): Promise<boolean> {
    const before = this.status().echoed;
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      if (this.status().echoed > before) return true;
    }
    return false;
  }
}
