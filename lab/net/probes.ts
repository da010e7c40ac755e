/**
 * Probes from the namespace the process runs in: TCP (connect, send a token, wait for its echo),
 * UDP (the same over a connected socket, one resend) and ICMP (ping). Verdicts:
 *   allow  - TCP: connected and the echo came back; UDP: the echo came back; ICMP: a reply.
 *   reject - a TCP RST or an ICMP error arrived before the timeout (ECONNREFUSED, EHOSTUNREACH, ...).
 *   drop   - nothing came back before the timeout.
 * Used by the one-shot prober (prober.ts) and by the workload's probe socket (workload.ts), which
 * saves a process start per source and round.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { connect, isIPv6 } from 'node:net';

export type Verdict = 'allow' | 'drop' | 'reject';
export interface Target { ip: string; port: number; protocol: 'TCP' | 'UDP' | 'ICMP' }
export interface Outcome { verdict: Verdict; detail: string; ms: number }

/**
 * A socket error before the timeout means something answered "no": ECONNREFUSED (RST, or ICMP port
 * unreachable for UDP), EHOSTUNREACH (ICMP host unreachable / admin prohibited), ENETUNREACH,
 * ECONNRESET, EPERM/EACCES (a local firewall). Only the kernel's own ETIMEDOUT is silence.
 */
function classify(err: NodeJS.ErrnoException): Verdict {
  return err.code === 'ETIMEDOUT' ? 'drop' : 'reject';
}

function outcome(start: number, verdict: Verdict, detail: string): Outcome {
  return { verdict, detail, ms: Date.now() - start };
}

function probeTcp(t: Target, timeoutMs: number): Promise<Outcome> {
  const start = Date.now();
  const token = `sluice-probe-${randomBytes(6).toString('hex')}\n`;
  return new Promise((resolve) => {
    let got = '';
    const sock = connect({ host: t.ip, port: t.port, noDelay: true });
    const done = (o: Outcome) => {
      clearTimeout(timer);
      sock.destroy();
      resolve(o);
    };
    const timer = setTimeout(() => done(outcome(start, 'drop', sock.connecting ? 'connect timeout' : 'no echo before timeout')), timeoutMs);
    sock.on('connect', () => sock.write(token));
    sock.setEncoding('utf8').on('data', (d: string) => {
      got += d;
      if (got.includes(token)) done(outcome(start, 'allow', 'echo'));
    });
    sock.on('error', (err: NodeJS.ErrnoException) => done(outcome(start, classify(err), err.code ?? err.message)));
    sock.on('close', () => done(outcome(start, 'reject', 'closed before echo')));
  });
}

function probeUdp(t: Target, timeoutMs: number): Promise<Outcome> {
  const start = Date.now();
  const token = Buffer.from(`sluice-probe-${randomBytes(6).toString('hex')}\n`);
  return new Promise((resolve) => {
    const sock = createSocket(isIPv6(t.ip) ? 'udp6' : 'udp4');
    let resend: NodeJS.Timeout | undefined;
    const done = (o: Outcome) => {
      clearTimeout(timer);
      clearTimeout(resend);
      try {
        sock.close();
      } catch {
        // already closed
      }
      resolve(o);
    };
    const timer = setTimeout(() => done(outcome(start, 'drop', 'no echo before timeout')), timeoutMs);
    // A connected socket, so the kernel reports ICMP errors for this flow as socket errors.
    sock.on('error', (err: NodeJS.ErrnoException) => done(outcome(start, classify(err), err.code ?? err.message)));
    sock.on('message', (msg) => {
      if (msg.equals(token)) done(outcome(start, 'allow', 'echo'));
    });
    sock.connect(t.port, t.ip, () => {
      const send = () => sock.send(token, (err) => err && done(outcome(start, classify(err as NodeJS.ErrnoException), (err as NodeJS.ErrnoException).code ?? err.message)));
      send();
      resend = setTimeout(send, Math.floor(timeoutMs / 2)); // one retry against a lost datagram
    });
  });
}

function probeIcmp(t: Target, timeoutMs: number): Promise<Outcome> {
  const start = Date.now();
  const wait = String(Math.max(1, Math.floor(timeoutMs / 1000)));
  return new Promise((resolve) => {
    const child = spawn('ping', ['-n', '-c', '1', '-W', wait, t.ip], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
    const killer = setTimeout(() => child.kill('SIGKILL'), timeoutMs + 1000);
    child.on('error', (err) => {
      clearTimeout(killer);
      resolve(outcome(start, 'reject', `ping: ${err.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(killer);
      const err = /(Destination [A-Za-z ]*Unreachable|Packet filtered|Prohibited|Network is unreachable|No route to host|Operation not permitted)/i.exec(out);
      if (code === 0) resolve(outcome(start, 'allow', 'echo reply'));
      else if (err) resolve(outcome(start, 'reject', err[1]!));
      else resolve(outcome(start, 'drop', 'no reply before timeout'));
    });
  });
}

function probeOne(t: Target, timeoutMs: number): Promise<Outcome> {
  switch (t.protocol) {
    case 'TCP':
      return probeTcp(t, timeoutMs);
    case 'UDP':
      return probeUdp(t, timeoutMs);
    case 'ICMP':
      return probeIcmp(t, timeoutMs);
    default:
      return Promise.resolve({ verdict: 'reject', detail: `protocol ${String((t as Target).protocol)} cannot be probed`, ms: 0 });
  }
}


/** Every target at once; results in target order. A probe that cannot even start is a reject naming why. */
export function probeTargets(targets: Target[], timeoutMs: number): Promise<Outcome[]> {
  return Promise.all(
    targets.map((t) => {
      try {
        return probeOne(t, timeoutMs);
      } catch (err) {
        return Promise.resolve({ verdict: 'reject' as const, detail: `probe could not start: ${(err as Error).message}`, ms: 0 });
      }
    }),
  );
}
