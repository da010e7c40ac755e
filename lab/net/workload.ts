#!/usr/bin/env node
/**
 * A Pod's workload: TCP and UDP echo servers on the given ports (every byte received is sent
 * back, so a line in is the same line out), on IPv4 and IPv6. Started detached inside the Pod's (or node's)
 * namespace; writes its pid file only once every port listens, so the pid file means "ready".
 * With --probe-socket it also sends probes from its namespace on request (one JSON line in, as the
 * prober's stdin, one JSON line of verdicts out), so probing needs no new process per round.
 * With --talk it is also a client from its first moment, as an application container that
 * connects at start-up: numbered UDP datagrams from one source port to IP:PORT every EVERY ms for
 * FOR ms, beginning before it serves anything (so before the lab's kubelet reports the Pod's
 * address); when the first was sent and the first echo came back go to <pidfile>.talk.json, with
 * SINCE (when the lab began creating the Pod's sandbox) and ADDED (when its CNI ADD answered)
 * beside them.
 *   node workload.js --tcp 80,81 --udp 80,81 --pidfile /run/sluice-lab/<L>/.../workload.pid [--probe-socket PATH]
 *     [--talk udp,IP,PORT,EVERY,FOR,SINCE,ADDED]
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { dirname } from 'node:path';
import { probeTargets, type Target } from './probes.js';

function parsePorts(value: string | undefined, flag: string): number[] {
  if (value === undefined || value === '') return [];
  return value.split(',').map((s) => {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw new Error(`${flag}: ${JSON.stringify(s)} is not a port 1-65535`);
    return n;
  });
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/**
 * TCP on `::` without IPV6_V6ONLY: one socket takes both families (IPv4 peers arrive as
 * ::ffff:a.b.c.d). A namespace with no IPv6 at all falls back to 0.0.0.0.
 */
async function listenTcp(port: number): Promise<Server> {
  try {
    return await listenTcpOn(port, '::');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EAFNOSUPPORT' && (err as NodeJS.ErrnoException).code !== 'EADDRNOTAVAIL') throw err;
    return listenTcpOn(port, '0.0.0.0');
  }
}

function listenTcpOn(port: number, host: string): Promise<Server> {
  const server = createServer({ noDelay: true }, (sock) => {
    sock.on('error', () => sock.destroy());
    sock.pipe(sock);
  });
  server.maxConnections = 100_000;
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(Object.assign(new Error(`TCP ${port}: ${err.message}`), { code: err.code })));
    server.listen({ port, host, backlog: 4096, ipv6Only: false }, () => resolve(server));
  });
}

/**
 * UDP on the wildcard address plus one socket per local address: a reply must leave from the
 * address the request was sent to (the external host has two), and only a socket bound to that
 * address makes the kernel pick it as the source. Linux delivers to the most specific socket.
 */
async function listenUdp(port: number): Promise<UdpSocket[]> {
  const v4 = await Promise.all(udpAddresses('IPv4', '0.0.0.0').map((addr) => bindUdp(port, addr, 'udp4')));
  // IPv6 apart (IPV6_V6ONLY), so the same per-address rule holds for each family. Loopback and
  // link-local addresses are never probed, so they do not count as a second address (198.51.100.10
  // on the external host's lo does).
  let v6: UdpSocket[] = [];
  try {
    v6 = await Promise.all(udpAddresses('IPv6', '::').map((addr) => bindUdp(port, addr, 'udp6')));
  } catch (err) {
    if (!/EAFNOSUPPORT|EADDRNOTAVAIL/.test((err as Error).message)) throw err;
  }
  return [...v4, ...v6];
}

function udpAddresses(family: 'IPv4' | 'IPv6', wildcard: string): string[] {
  const locals = Object.values(networkInterfaces()).flat().filter((a) => a?.family === family && !a.address.startsWith('127.') && a.address !== '::1' && !a.address.startsWith('fe80:')).map((a) => a!.address);
  const extra = [...new Set(locals)];
  return [wildcard, ...(extra.length > 1 ? extra : [])];
}

function bindUdp(port: number, address: string, type: 'udp4' | 'udp6'): Promise<UdpSocket> {
  const sock = createSocket({ type, reuseAddr: true, ...(type === 'udp6' ? { ipv6Only: true } : {}) });
  sock.on('message', (msg, rinfo) => sock.send(msg, rinfo.port, rinfo.address));
  return new Promise((resolve, reject) => {
    sock.once('error', (err) => reject(new Error(`UDP ${address}:${port}: ${err.message}`)));
    sock.bind(port, address, () => {
      sock.on('error', () => undefined); // e.g. ICMP errors for replies: keep serving
      resolve(sock);
    });
  });
}

/** The probe socket: each connection is one request line and one answer line. */
function serveProbes(path: string): Promise<Server> {
  mkdirSync(dirname(path), { recursive: true });
  rmSync(path, { force: true }); // left by a workload that was killed
  const server = createServer((conn) => {
    let input = '';
    conn.setEncoding('utf8');
    conn.on('error', () => conn.destroy());
    conn.on('data', (d: string) => {
      input += d;
      const nl = input.indexOf('\n');
      if (nl < 0) return;
      let req: { timeoutMs?: number; targets: Target[] };
      try {
        req = JSON.parse(input.slice(0, nl)) as typeof req;
      } catch (err) {
        conn.end(`${JSON.stringify({ error: (err as Error).message })}\n`);
        return;
      }
      probeTargets(req.targets, req.timeoutMs ?? 1500).then(
        (results) => conn.end(`${JSON.stringify(results)}\n`),
        (err: Error) => conn.end(`${JSON.stringify({ error: err.message })}\n`),
      );
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', (err) => reject(new Error(`probe socket ${path}: ${err.message}`)));
    server.listen(path, () => resolve(server));
  });
}

/** What a talking workload records (read by lab tests): wall-clock ms. */
export interface TalkRecord {
  target: string;
  /** When the lab began creating the sandbox (before CNI ADD), and when the CNI ADD answered. */
  since: number;
  added: number;
  started: number;
  sent: number;
  firstSent?: number;
  replies: number;
  firstReply?: number;
  lastReply?: number;
  /** The lowest sequence number answered (0: the very first datagram was). */
  firstAnsweredSeq?: number;
  done: boolean;
  errors: string[];
}

/** --talk udp,IP,PORT,EVERY,FOR: see the header. */
function talk(spec: string, file: string): void {
  const [proto, ip, port, every, forMs, since, added] = spec.split(',');
  const n = (v: string | undefined, what: string) => {
    const x = Number(v);
    if (!Number.isInteger(x) || x < 1) throw new Error(`--talk: ${what} ${JSON.stringify(v)} is not a whole number ≥ 1`);
    return x;
  };
  if (proto !== 'udp' || !ip) throw new Error(`--talk ${JSON.stringify(spec)}: use udp,IP,PORT,EVERY_MS,FOR_MS,SINCE_MS,ADDED_MS`);
  const [dport, everyMs, total, sinceMs, addedMs] = [n(port, 'port'), n(every, 'interval'), n(forMs, 'duration'), n(since, 'start time'), n(added, 'ADD time')];
  const rec: TalkRecord = { target: `${ip}:${dport}`, since: sinceMs, added: addedMs, started: Date.now(), sent: 0, replies: 0, done: false, errors: [] };
  const save = () => {
    writeFileSync(`${file}.tmp`, JSON.stringify(rec));
    renameSync(`${file}.tmp`, file);
  };
  const sock = createSocket(ip.includes(':') ? 'udp6' : 'udp4');
  sock.on('error', (err) => rec.errors.push(err.message));
  sock.on('message', (msg) => {
    rec.replies++;
    rec.firstReply ??= Date.now();
    rec.lastReply = Date.now();
    const seq = Number(msg.toString());
    if (Number.isInteger(seq) && (rec.firstAnsweredSeq === undefined || seq < rec.firstAnsweredSeq)) rec.firstAnsweredSeq = seq;
  });
  const send = () => {
    sock.send(String(rec.sent), dport, ip, (err) => {
      if (err) rec.errors.push(err.message);
    });
    rec.firstSent ??= Date.now();
    rec.sent++;
  };
  send();
  const tick = setInterval(send, everyMs);
  const saver = setInterval(save, 100);
  setTimeout(() => {
    clearInterval(tick);
    // Replies still on their way get a moment.
    setTimeout(() => {
      clearInterval(saver);
      rec.done = true;
      save();
      sock.close();
    }, 200);
  }, total);
}

async function main(): Promise<void> {
  const talkSpec = arg('--talk');
  const pidfileArg = arg('--pidfile');
  if (talkSpec && pidfileArg) talk(talkSpec, `${pidfileArg}.talk.json`);
  const tcp = parsePorts(arg('--tcp'), '--tcp');
  const udp = parsePorts(arg('--udp'), '--udp');
  const pidfile = arg('--pidfile');
  if (!pidfile) throw new Error('--pidfile is required');
  const servers = await Promise.all(tcp.map(listenTcp));
  const sockets = (await Promise.all(udp.map(listenUdp))).flat();
  const probeSocket = arg('--probe-socket');
  if (probeSocket) servers.push(await serveProbes(probeSocket));
  writeFileSync(`${pidfile}.tmp`, `${process.pid}\n`);
  renameSync(`${pidfile}.tmp`, pidfile);
  const stop = (): void => {
    for (const s of servers) s.close();
    for (const s of sockets) s.close();
    rmSync(pidfile, { force: true });
    if (probeSocket) rmSync(probeSocket, { force: true });
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  // A probe gone wrong (a socket call after its socket closed) must not take the Pod's servers
  // with it: said in the workload's log, and the servers go on.
  process.on('uncaughtException', (err) => process.stderr.write(`workload: ${err.stack ?? err.message}\n`));
}

main().catch((err: Error) => {
  process.stderr.write(`workload: ${err.message}\n`);
  process.exit(1);
});
