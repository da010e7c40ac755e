#!/usr/bin/env node
/**
 * A Pod's workload: TCP and UDP echo servers on the given ports (every byte received is sent
 * back, so a line in is the same line out). Started detached inside the Pod's (or node's)
 * namespace; writes its pid file only once every port listens, so the pid file means "ready".
 *   node workload.js --tcp 80,81 --udp 80,81 --pidfile /run/sluice-lab/<L>/.../workload.pid
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';

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

function listenTcp(port: number): Promise<Server> {
  const server = createServer({ noDelay: true }, (sock) => {
    sock.on('error', () => sock.destroy());
    sock.pipe(sock);
  });
  server.maxConnections = 100_000;
  return new Promise((resolve, reject) => {
    server.once('error', (err) => reject(new Error(`TCP ${port}: ${err.message}`)));
    server.listen({ port, host: '0.0.0.0', backlog: 4096 }, () => resolve(server));
  });
}

/**
 * UDP on the wildcard address plus one socket per local address: a reply must leave from the
 * address the request was sent to (the external host has two), and only a socket bound to that
 * address makes the kernel pick it as the source. Linux delivers to the most specific socket.
 */
async function listenUdp(port: number): Promise<UdpSocket[]> {
  const locals = Object.values(networkInterfaces()).flat().filter((a) => a?.family === 'IPv4').map((a) => a!.address);
  const extra = [...new Set(locals)].filter((a) => !a.startsWith('127.'));
  return Promise.all(['0.0.0.0', ...(extra.length > 1 ? extra : [])].map((addr) => bindUdp(port, addr)));
}

function bindUdp(port: number, address: string): Promise<UdpSocket> {
  const sock = createSocket({ type: 'udp4', reuseAddr: true });
  sock.on('message', (msg, rinfo) => sock.send(msg, rinfo.port, rinfo.address));
  return new Promise((resolve, reject) => {
    sock.once('error', (err) => reject(new Error(`UDP ${address}:${port}: ${err.message}`)));
    sock.bind(port, address, () => {
      sock.on('error', () => undefined); // e.g. ICMP errors for replies: keep serving
      resolve(sock);
    });
  });
}

async function main(): Promise<void> {
  const tcp = parsePorts(arg('--tcp'), '--tcp');
  const udp = parsePorts(arg('--udp'), '--udp');
  const pidfile = arg('--pidfile');
  if (!pidfile) throw new Error('--pidfile is required');
  const servers = await Promise.all(tcp.map(listenTcp));
  const sockets = (await Promise.all(udp.map(listenUdp))).flat();
  writeFileSync(`${pidfile}.tmp`, `${process.pid}\n`);
  renameSync(`${pidfile}.tmp`, pidfile);
  const stop = (): void => {
    for (const s of servers) s.close();
    for (const s of sockets) s.close();
    rmSync(pidfile, { force: true });
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err: Error) => {
  process.stderr.write(`workload: ${err.message}\n`);
  process.exit(1);
});
