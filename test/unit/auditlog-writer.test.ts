import t from 'tap';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AuditLogger, RotatingFileWriter } from '../../daemon/enforcement/auditlog/writer.js';
import type { AuditEvent } from '../../daemon/enforcement/auditlog/format.js';

const dir = mkdtempSync(join(tmpdir(), 'of-auditlog-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

t.test('size-bounded rotation keeps N backups, newest in .1, nothing lost in between', async (t) => {
  const path = join(dir, 'rot', 'np.log'); // directory created on demand
  const w = new RotatingFileWriter({ path, maxBytes: 100, maxBackups: 2 });
  const line = (i: number) => `line ${String(i).padStart(3, '0')} ${'x'.repeat(20)}\n`; // 30 bytes
  for (let i = 0; i < 12; i++) w.write(line(i));
  w.close();
  t.equal(w.rotations, 3, '3 lines per file: rotations after lines 3, 6, 9');
  t.equal(readFileSync(path, 'utf8'), line(9) + line(10) + line(11));
  t.equal(readFileSync(`${path}.1`, 'utf8'), line(6) + line(7) + line(8));
  t.equal(readFileSync(`${path}.2`, 'utf8'), line(3) + line(4) + line(5));
  t.notOk(existsSync(`${path}.3`), 'oldest dropped');
  for (const f of [path, `${path}.1`, `${path}.2`]) t.ok(statSync(f).size <= 100, `${f} within maxBytes`);
});

t.test('appends to an existing file and counts its size', async (t) => {
  const path = join(dir, 'existing.log');
  writeFileSync(path, 'a'.repeat(90));
  const w = new RotatingFileWriter({ path, maxBytes: 100, maxBackups: 1 });
  w.write('0123456789\n');
  w.close();
  t.equal(readFileSync(`${path}.1`, 'utf8'), 'a'.repeat(90), 'rotated before overflowing');
  t.equal(readFileSync(path, 'utf8'), '0123456789\n');
});

t.test('bad settings are refused with the setting named', async (t) => {
  t.throws(() => new RotatingFileWriter({ path: join(dir, 'x.log'), maxBytes: 0, maxBackups: 1 }), /maxBytes 0/);
  t.throws(() => new RotatingFileWriter({ path: join(dir, 'x.log'), maxBytes: 10, maxBackups: -1 }), /maxBackups -1/);
  writeFileSync(join(dir, 'file'), '');
  t.throws(() => new RotatingFileWriter({ path: join(dir, 'file', 'np.log'), maxBytes: 10, maxBackups: 1 }), /cannot create directory/);
  t.throws(() => new AuditLogger({ path: join(dir, 'y.log'), windowMs: 0 }), /windowMs 0/);
});

t.test('AuditLogger: allow at once, drops deduplicated by the timer, held lines flushed on close', async (t) => {
  const path = join(dir, 'logger', 'np.log');
  const T0 = BigInt(Date.UTC(2026, 10, 21, 8, 0, 0)) * 1_000_000n;
  let now = T0;
  const logger = new AuditLogger({ path, windowMs: 20, clock: () => now });
  const ev: Omit<AuditEvent, 'timeNs'> = {
    tableName: 'IngressDefaultRule',
    policyRef: 'K8sNetworkPolicy',
    action: 'Drop',
    priority: -1,
    srcIp: '10.0.0.1',
    srcPort: 1234,
    dstIp: '10.0.0.2',
    dstPort: 80,
    protocol: 'TCP',
    length: 60,
  };
  logger.log({ ...ev, action: 'Allow', tableName: 'IngressRule', policyRef: 'K8sNetworkPolicy:ns/np', priority: 190 });
  logger.log(ev);
  now = T0 + 5_000_000n;
  logger.log(ev);
  now = T0 + 7_000_000n;
  logger.log(ev);
  now = T0 + 30_000_000n; // the window has closed when the timer fires
  const lines = () => (existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean) : []);
  for (let i = 0; i < 100 && lines().length < 2; i++) await new Promise((r) => setTimeout(r, 10));
  t.same(lines(), [
    '2026/11/21 08:00:00.000000 IngressRule K8sNetworkPolicy:ns/np Allow 190 10.0.0.1 1234 10.0.0.2 80 TCP 60',
    '2026/11/21 08:00:00.000000 IngressDefaultRule K8sNetworkPolicy Drop -1 10.0.0.1 1234 10.0.0.2 80 TCP 60 [3 packets in 7ms]',
  ]);
  logger.log({ ...ev, action: 'Reject', timeNs: T0 + 40_000_000n });
  logger.close();
  t.equal(lines().length, 3, 'held Reject written by close()');
  t.match(lines()[2], /08:00:00\.040000 .* Reject -1 .* TCP 60$/);
  logger.log(ev);
  t.equal(lines().length, 3, 'nothing after close');
  t.equal(logger.linesWritten, 3);
});
