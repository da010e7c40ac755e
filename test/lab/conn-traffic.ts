/**
 * Connections held open across a policy change, for the lab tests that check what a change does to
 * them: a receiver in one Pod (UDP and TCP on one port) records, per source address and port, how
 * many datagrams (with their sequence numbers) or bytes arrived and when the last one did; senders
 * in other Pods keep one UDP flow (one source port, a numbered datagram every `everyMs`) or one TCP
 * connection (a write every `everyMs`) going and record socket errors (a reset shows there).
 * Times are the machine's wall clock (every namespace shares it).
 */
import { NetnsScript } from './enforce-traffic.js';

const SCRIPT = `
const fs = require('node:fs'); const net = require('node:net'); const dgram = require('node:dgram');
const [role, statusFile, a, b, c, d, e] = process.argv.slice(1);
const st = { role, flows: {}, errors: [], sent: 0, ready: false };
const save = () => { fs.writeFileSync(statusFile + '.tmp', JSON.stringify(st)); fs.renameSync(statusFile + '.tmp', statusFile); };
setInterval(save, 50);
process.on('SIGTERM', () => { save(); process.exit(0); });
const flow = (key) => (st.flows[key] ??= { packets: 0, bytes: 0, last: 0, seqs: [] });
if (role === 'receive') {
  const port = Number(a); const family = b === '6' ? 'udp6' : 'udp4'; const host = b === '6' ? '::' : '0.0.0.0';
  const u = dgram.createSocket(family);
  u.on('message', (m, r) => { const f = flow('udp ' + r.address + ' ' + r.port); f.packets++; f.bytes += m.length; f.last = Date.now(); f.seqs.push(Number(m.toString())); });
  u.bind(port, host);
  const s = net.createServer((sock) => {
    const key = 'tcp ' + sock.remoteAddress + ' ' + sock.remotePort;
    sock.on('data', (dd) => { const f = flow(key); f.packets++; f.bytes += dd.length; f.last = Date.now(); });
    sock.on('error', (err) => st.errors.push(key + ' ' + (err.code || err.message)));
    // talk-back: the server writes too, so its segments race the client's after a change.
    if (c === 'talk-back') { const tb = setInterval(() => sock.write('y'), 5); sock.on('close', () => clearInterval(tb)); }
  });
  s.listen(port, host, () => { st.ready = true; save(); });
} else if (role === 'udp') {
  const [ip, port, sport, everyMs] = [a, Number(b), Number(c), Number(d)];
  const u = dgram.createSocket(ip.includes(':') ? 'udp6' : 'udp4');
  u.on('error', (err) => st.errors.push(err.code || err.message));
  u.bind(sport, () => { st.ready = true; setInterval(() => { u.send(String(st.sent++), port, ip); }, everyMs); });
} else {
  const [ip, port, everyMs] = [a, Number(b), Number(c)];
  // Connects again until it is connected once (the receiver may start a moment later); errors
  // after that are what the test looks at.
  const open = () => {
    const s = net.connect({ host: ip, port }, () => { st.ready = true; setInterval(() => { s.write('x'.repeat(64)); st.sent++; }, everyMs); });
    s.on('error', (err) => { if (st.ready) st.errors.push(err.code || err.message); else setTimeout(open, 100); });
    s.on('close', () => { if (st.ready) st.errors.push('closed'); });
  };
  open();
}
`;

export interface FlowRecord {
  packets: number;
  bytes: number;
  /** Wall-clock ms of the last arrival. */
  last: number;
  /** UDP: the sequence numbers that arrived, in order. */
  seqs: number[];
}

export interface ConnStatus {
  flows: Record<string, FlowRecord>;
  errors: string[];
  sent: number;
  ready: boolean;
}

/** One process in a Pod's namespace (receiver or sender), readable at any time. */
export class ConnProcess extends NetnsScript<ConnStatus> {
  private constructor(netns: string, args: string[]) {
    super(netns, SCRIPT, (file) => [args[0]!, file, ...args.slice(1)], { flows: {}, errors: [], sent: 0, ready: false });
  }

  /**
   * UDP and TCP on `port` (IPv4, or IPv6 with family 6). `talkBack`: the server writes a byte to
   * each TCP connection every 5 ms too (its segments then race the client's).
   */
  static receiver(netns: string, port: number, family: 4 | 6 = 4, talkBack = false): ConnProcess {
    return new ConnProcess(netns, ['receive', String(port), String(family), ...(talkBack ? ['talk-back'] : [])]);
  }

  /** One UDP flow from source port `sport`: a numbered datagram every `everyMs`. */
  static udp(netns: string, ip: string, port: number, sport: number, everyMs: number): ConnProcess {
    return new ConnProcess(netns, ['udp', ip, String(port), String(sport), String(everyMs)]);
  }

  /** One TCP connection: 64 bytes every `everyMs`. */
  static tcp(netns: string, ip: string, port: number, everyMs: number): ConnProcess {
    return new ConnProcess(netns, ['tcp', ip, String(port), String(everyMs)]);
  }

  /** Waits until the socket is bound or connected (node starting in the namespace takes a moment). */
  async ready(timeoutMs = 20_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (this.status().ready) return true;
      await new Promise((r) => setTimeout(r, 50));
    }
    return false;
  }

  /** The flow from `ip` (any port) of `proto`: the receiver's record of one sender. */
  from(proto: 'udp' | 'tcp', ip: string): FlowRecord | undefined {
    const found = Object.entries(this.status().flows).filter(([k]) => k.startsWith(`${proto} ${ip} `) || k.startsWith(`${proto} ::ffff:${ip} `));
    return found[0]?.[1];
  }
}

/** Datagrams missing between the first and the last that arrived. */
export function lostBetween(seqs: readonly number[]): number {
  if (seqs.length === 0) return 0;
  const seen = new Set(seqs);
  let lost = 0;
  for (let i = Math.min(...seqs); i <= Math.max(...seqs); i++) if (!seen.has(i)) lost++;
  return lost;
}
