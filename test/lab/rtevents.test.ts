/**
 * The agent's rtnetlink event watch against the real kernel, in a private network namespace
 * (rte-<pid>): routes (IPv4, IPv6, table 300), the fwmark rule and a permanent neighbour are added
 * and deleted with `ip`, and the events the watch decodes must say exactly that, and the repair
 * decision must pick the removals sluice cares about.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../../lab/net/names.js';
import { run } from '../../lab/net/exec.js';
import { missingPrereq } from './datapath-env.js';

const NS = `rte-${process.pid}`;
const DIST = join(repoRoot(), 'dist', 'daemon', 'hostnet');
const missing = (await missingPrereq(['ip'])) ?? (existsSync(join(DIST, 'rtevents.js')) ? undefined : 'dist/ is not built (npm run -s build)');
if (missing) t.plan(0, missing);
else {
  const ip = (...args: string[]) => run('ip', ['-n', NS, ...args]);
  const removeNs = () => run('ip', ['netns', 'del', NS], { allowFail: true });
  await run('ip', ['netns', 'add', NS]);
  t.teardown(removeNs);
  try {
    // veth pairs stand in for the gateway and a Pod's host veth (no dummy module here)
    for (const [dev, peer] of [['antrea-gw0', 'gw-peer'], ['veth-x', 'x-peer']]) {
      await ip('link', 'add', dev!, 'type', 'veth', 'peer', 'name', peer!);
      await ip('link', 'set', dev!, 'up');
      await ip('link', 'set', peer!, 'up');
    }
    await ip('addr', 'add', '192.168.100.1/32', 'dev', 'antrea-gw0');
    await ip('-6', 'addr', 'add', 'fd00:99::1/64', 'dev', 'antrea-gw0', 'nodad');
  } catch (err) {
    // a failed set-up ends the file before its teardown would run
    await removeNs();
    throw err;
  }

  // The watch runs inside the namespace and prints one JSON line per event: the event, whether it
  // is a repair event for the gateway, and its log text.
  const script = `
    const { watchRtEvents, ifindexOf, describeRtEvent } = await import(${JSON.stringify(join(DIST, 'rtevents.js'))});
    const { isRepairEvent } = await import(${JSON.stringify(join(DIST, 'monitor.js'))});
    const pods = new Set(['10.10.1.5', 'fd00:10::5']);
    watchRtEvents((ev) => {
      const gw = ifindexOf('antrea-gw0');
      process.stdout.write(JSON.stringify({ ev, repair: isRepairEvent(ev, { gatewayIfindex: gw, podIps: pods, neighbours: new Set(['169.254.253.1']) }), text: describeRtEvent(ev, (i) => (i === gw ? 'antrea-gw0' : undefined)) }) + '\\n');
    }, (err) => process.stdout.write(JSON.stringify({ error: err.message }) + '\\n'));
    process.stdout.write('{"ready":true}\\n');
  `;
  const child = spawn('ip', ['netns', 'exec', NS, process.execPath, '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => child.kill());
  const lines: Record<string, unknown>[] = [];
  let buf = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    buf += d;
    const parts = buf.split('\n');
    buf = parts.pop() ?? '';
    for (const p of parts) lines.push(JSON.parse(p) as Record<string, unknown>);
  });
  const until = async (pred: () => boolean, what: string) => {
    const end = Date.now() + 10_000;
    while (!pred()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(lines)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  await until(() => lines.some((l) => l.ready), 'the watch to start');

  /** Runs `ip` commands and returns the events they caused (after a marker route, which is dropped). */
  let marker = 0;
  const eventsOf = async (...cmds: string[][]) => {
    const from = lines.length;
    for (const c of cmds) await ip(...c);
    const m = `10.255.0.${++marker}`;
    await ip('route', 'add', `${m}/32`, 'dev', 'veth-x');
    await until(() => lines.slice(from).some((l) => (l.ev as { dst?: string } | undefined)?.dst === m), `the marker route ${m}`);
    // The kernel's own routes for the links' IPv6 link-local addresses (table local, fe80::/10,
    // ff00::/8) may come at any time after the links went up: they are not what the commands did.
    const kernels = (ev: { table?: number; dst?: string }) => ev.table === 255 || /^f[ef]/.test(ev.dst ?? '');
    return lines.slice(from).filter((l) => {
      const ev = l.ev as { table?: number; dst?: string } | undefined;
      return ev !== undefined && ev.dst !== m && !kernels(ev);
    }) as { ev: Record<string, unknown>; repair: boolean; text: string }[];
  };

  t.test('IPv4: the table 300 default route through the gateway, added and deleted', async (t) => {
    const evs = await eventsOf(['route', 'add', 'default', 'via', '169.254.253.1', 'dev', 'antrea-gw0', 'onlink', 'table', '300'], ['route', 'del', 'default', 'table', '300']);
    t.match(evs.map((e) => e.ev), [
      { kind: 'route', deleted: false, family: 4, dst: '0.0.0.0', prefixLen: 0, table: 300, via: '169.254.253.1' },
      { kind: 'route', deleted: true, family: 4, dst: '0.0.0.0', prefixLen: 0, table: 300, via: '169.254.253.1' },
    ]);
    t.same(evs.map((e) => e.repair), [false, true], 'only the deletion is a repair event');
    t.equal(evs[1]?.text, 'Deleted route default via 169.254.253.1 dev antrea-gw0 table 300');
  });

  t.test('a Pod route moved from the gateway to another device', async (t) => {
    const evs = await eventsOf(['route', 'add', '10.10.1.5/32', 'dev', 'antrea-gw0'], ['route', 'replace', '10.10.1.5/32', 'dev', 'veth-x'], ['route', 'del', '10.10.1.5/32']);
    t.match(evs.map((e) => e.ev), [
      { kind: 'route', deleted: false, dst: '10.10.1.5', prefixLen: 32, table: 254 },
      { kind: 'route', deleted: false, dst: '10.10.1.5', prefixLen: 32, table: 254 },
      { kind: 'route', deleted: true, dst: '10.10.1.5', prefixLen: 32 },
    ]);
    t.same(evs.map((e) => e.repair), [false, true, false], 'the replace onto the veth is a repair event; the route put back on the gateway and its removal from the veth are not');
  });

  t.test('IPv6: a Pod route on the gateway deleted', async (t) => {
    const evs = await eventsOf(['-6', 'route', 'add', 'fd00:10::5/128', 'dev', 'antrea-gw0'], ['-6', 'route', 'del', 'fd00:10::5/128', 'dev', 'antrea-gw0']);
    t.match(evs.map((e) => e.ev), [
      { kind: 'route', deleted: false, family: 6, dst: 'fd00:10::5', prefixLen: 128 },
      { kind: 'route', deleted: true, family: 6, dst: 'fd00:10::5', prefixLen: 128 },
    ]);
    t.same(evs.map((e) => e.repair), [false, true]);
  });

  t.test('the fwmark rule into table 300, both families', async (t) => {
    const evs = await eventsOf(
      ['rule', 'add', 'pref', '300', 'fwmark', '0x800/0x800', 'iif', 'antrea-gw0', 'table', '300'],
      ['rule', 'del', 'pref', '300'],
      ['-6', 'rule', 'add', 'pref', '300', 'fwmark', '0x800/0x800', 'iif', 'antrea-gw0', 'table', '300'],
      ['-6', 'rule', 'del', 'pref', '300'],
    );
    t.match(evs.map((e) => e.ev), [
      { kind: 'rule', deleted: false, family: 4, priority: 300, table: 300, fwmark: 0x800, fwmask: 0x800, iif: 'antrea-gw0' },
      { kind: 'rule', deleted: true, family: 4, priority: 300, table: 300, fwmark: 0x800, fwmask: 0x800, iif: 'antrea-gw0' },
      { kind: 'rule', deleted: false, family: 6, table: 300 },
      { kind: 'rule', deleted: true, family: 6, table: 300 },
    ]);
    t.same(evs.map((e) => e.repair), [false, true, false, true]);
    t.equal(evs[1]?.text, 'Deleted rule 300: fwmark 0x800/0x800 iif antrea-gw0 lookup 300');
  });

  t.test('the permanent gateway neighbour deleted is a repair event; another neighbour is not', async (t) => {
    const evs = await eventsOf(
      ['neigh', 'add', '169.254.253.1', 'lladdr', '12:34:56:78:9a:bc', 'dev', 'antrea-gw0', 'nud', 'permanent'],
      ['neigh', 'del', '169.254.253.1', 'dev', 'antrea-gw0'],
      ['neigh', 'add', '192.168.100.7', 'lladdr', '02:00:00:00:00:07', 'dev', 'antrea-gw0', 'nud', 'stale'],
      ['neigh', 'del', '192.168.100.7', 'dev', 'antrea-gw0'],
    );
    const dels = evs.filter((e) => e.ev.kind === 'neigh' && e.ev.deleted);
    // The kernel reports a deleted neighbour as FAILED (0x20) without its lladdr, permanent or not.
    t.match(dels.map((e) => e.ev), [{ ip: '169.254.253.1', state: 0x20 }, { ip: '192.168.100.7', state: 0x20 }]);
    t.same(dels.map((e) => e.repair), [true, false]);
    t.equal(dels[0]?.text, 'Deleted neighbour 169.254.253.1 dev antrea-gw0');
    const added = evs.find((e) => e.ev.kind === 'neigh' && !e.ev.deleted && e.ev.ip === '169.254.253.1');
    t.match(added?.ev, { lladdr: '12:34:56:78:9a:bc', state: 0x80 }, 'the addition carries the lladdr and PERMANENT');
  });

  t.test('no error was reported', async (t) => {
    t.same(lines.filter((l) => l.error), []);
  });
}
