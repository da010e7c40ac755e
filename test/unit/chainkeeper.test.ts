/**
 * The agent's chain keeper on a real directory with real file events: it chains at start, re-chains
 * when "the primary" replaces its file (by rename, as aws-node does) or a new file sorts first, never
 * rewrites a chained file, stands down while the plugin binary is missing (an uninstall in progress)
 * or an unusable file sorts first, and backs off from a writer that keeps undoing it. File events are
 * real here, so those tests run on the real clock; the rescan period and the debounce are stepped
 * on a manual one.
 */
import t from 'tap';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, mkdirSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { ChainKeeper } from '../../daemon/node/chainkeeper.js';
import { realClock } from '../../daemon/clock.js';
import { uninstallCni } from '../../install/cni-install.js';
import { ROOT } from './cni-harness.js';
import { ManualClock } from './manual-clock.js';

const AWS = readFileSync(join(ROOT, 'test', 'fixtures', 'aws-vpc-cni-10-aws.conflist'), 'utf8');
const types = (path: string) => (JSON.parse(readFileSync(path, 'utf8')) as { plugins: { type: string }[] }).plugins.map((p) => p.type);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(cond: () => boolean, what: string, capMs = 5000): Promise<number> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > capMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
  return Date.now() - t0;
}

function setup(t: { teardown: (fn: () => void) => void }) {
  const root = mkdtempSync(join(tmpdir(), 'sluice-keeper-'));
  const conf = join(root, 'net.d');
  const bin = join(root, 'bin');
  mkdirSync(conf);
  mkdirSync(bin);
  writeFileSync(join(bin, 'sluice-cni'), '#!/bin/sh\n');
  /** Replaces a file the way a daemon does: write a temporary file, rename it over. */
  const primaryWrites = (name: string, text: string) => {
    writeFileSync(join(conf, `.${name}.tmp`), text);
    renameSync(join(conf, `.${name}.tmp`), join(conf, name));
  };
  const rechained: string[] = [];
  // A rescan period far beyond the test: re-chaining within it comes from the directory's events.
  const keeper = new ChainKeeper({ confDir: conf, binDir: bin, entry: {}, log: pino({ level: 'silent' }), clock: realClock, rescanMs: 600_000, debounceMs: 50, onRechained: (f) => rechained.push(f) });
  t.teardown(() => {
    keeper.close();
    rmSync(root, { recursive: true, force: true });
  });
  return { conf, bin, keeper, primaryWrites, rechained };
}

t.test('chains at start, re-chains a rewritten file and a new file sorting first; leaves a chained file alone', async (t) => {
  const { conf, keeper, primaryWrites, rechained } = setup(t);
  primaryWrites('10-aws.conflist', AWS);
  await keeper.start();
  t.same(types(join(conf, '10-aws.conflist')), ['aws-cni', 'egress-cni', 'sluice-cni', 'portmap'], 'chained at start');
  t.match(keeper.status(), { state: 'chained', file: '10-aws.conflist', rechains: 1 });

  const mtime = statSync(join(conf, '10-aws.conflist')).mtimeMs;
  await keeper.check('test');
  t.equal(statSync(join(conf, '10-aws.conflist')).mtimeMs, mtime, 'a chained file is never rewritten');

  primaryWrites('10-aws.conflist', AWS); // aws-node restarts and writes its file again
  const ms = await until(() => types(join(conf, '10-aws.conflist')).includes('sluice-cni'), 're-chain');
  t.comment(`re-chained ${ms} ms after the primary replaced its file`);
  t.same(types(join(conf, '10-aws.conflist')), ['aws-cni', 'egress-cni', 'sluice-cni', 'portmap']);
  await until(() => keeper.status().rechains === 2, 'status');
  t.same(rechained, [join(conf, '10-aws.conflist'), join(conf, '10-aws.conflist')], 'each re-chain is reported (Pods created meanwhile escaped)');

  primaryWrites('05-new.conf', JSON.stringify({ cniVersion: '1.0.0', name: 'k8s', type: 'ptp' }));
  await until(() => readdirSync(conf).includes('05-new.conflist') && !readdirSync(conf).includes('05-new.conf'), 'the new first file chained');
  t.same(types(join(conf, '05-new.conflist')), ['ptp', 'sluice-cni'], 'a new file that sorts first is chained (as a .conflist)');
  // The file is on disk a moment before the keeper records it in its status.
  await until(() => keeper.status().file === '05-new.conflist', 'status');
  t.match(keeper.status(), { state: 'chained', file: '05-new.conflist' });
  t.same(readdirSync(conf).filter((f) => f.includes('tmp')), [], 'no temporary files left');
});

t.test('an uninstall is not undone; an unusable first file is left alone', async (t) => {
  const { conf, bin, keeper, primaryWrites } = setup(t);
  primaryWrites('10-aws.conflist', AWS);
  await keeper.start();
  t.ok(types(join(conf, '10-aws.conflist')).includes('sluice-cni'));
  await uninstallCni({ confDir: conf, binDir: bin });
  await sleep(400);
  await keeper.check('test');
  t.same(types(join(conf, '10-aws.conflist')), ['aws-cni', 'egress-cni', 'portmap'], 'sluice stays unchained while its binary is gone');
  t.match(keeper.status(), { state: 'plugin-missing', lastError: /sluice-cni is missing/ });

  writeFileSync(join(bin, 'sluice-cni'), '#!/bin/sh\n');
  primaryWrites('01-broken.conflist', '{"cniVersion": "1.0.0", "name": ');
  await sleep(300);
  await keeper.check('test');
  t.match(keeper.status(), { state: 'refused', lastError: /01-broken\.conflist: not valid JSON.*sorts before 10-aws\.conflist/ });
  t.equal(readFileSync(join(conf, '01-broken.conflist'), 'utf8'), '{"cniVersion": "1.0.0", "name": ', 'the unusable file is untouched');
  t.notOk(types(join(conf, '10-aws.conflist')).includes('sluice-cni'), 'and nothing is chained past it');
  rmSync(join(conf, '01-broken.conflist'));
  await until(() => types(join(conf, '10-aws.conflist')).includes('sluice-cni'), 'chained once the file is gone');
});

t.test('a writer that keeps undoing the chain: the keeper backs off and says so', async (t) => {
  const { keeper, primaryWrites } = setup(t);
  primaryWrites('10-aws.conflist', AWS);
  await keeper.start();
  for (let i = 0; i < 8 && keeper.status().state !== 'backing-off'; i++) {
    primaryWrites('10-aws.conflist', AWS);
    await keeper.check('test');
  }
  t.match(keeper.status(), { state: 'backing-off', lastError: /another writer keeps rewriting it/ });
  const rechains = keeper.status().rechains;
  primaryWrites('10-aws.conflist', AWS);
  await keeper.check('test');
  t.equal(keeper.status().rechains, rechains, 'no rewrite while backing off');
});

t.test('on a manual clock: a directory missing at start is rescanned every 5 s, and checked 100 ms after the rescan', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'sluice-keeper-'));
  const conf = join(root, 'net.d');
  const bin = join(root, 'bin');
  mkdirSync(bin);
  writeFileSync(join(bin, 'sluice-cni'), '#!/bin/sh\n');
  const clock = new ManualClock();
  const rechained: string[] = [];
  // The default rescan period and debounce; without a directory to watch, only the clock moves it.
  const keeper = new ChainKeeper({ confDir: conf, binDir: bin, entry: {}, log: pino({ level: 'silent' }), clock, onRechained: (f) => rechained.push(f) });
  t.teardown(() => {
    keeper.close();
    rmSync(root, { recursive: true, force: true });
  });
  /** Lets the keeper's file I/O finish (bounded by turns of the event loop, not by time). */
  const settleIo = async (cond: () => boolean) => {
    for (let i = 0; i < 5000 && !cond(); i++) await new Promise<void>((r) => setImmediate(r));
  };
  const chained = () => existsSync(join(conf, '10-aws.conflist')) && types(join(conf, '10-aws.conflist')).includes('sluice-cni');

  await keeper.start();
  t.match(keeper.status(), { state: 'waiting' }, 'no directory yet: waiting for the primary');
  mkdirSync(conf);
  writeFileSync(join(conf, '10-aws.conflist'), AWS);
  await clock.advance(4999);
  t.equal(clock.waiting, 1, 'before 5 s only the rescan waits (no directory was there to watch)');
  t.notOk(chained());
  await clock.advance(1);
  t.equal(clock.waiting, 2, 'the rescan at 5 s armed the debounced check');
  await clock.advance(99);
  t.equal(clock.waiting, 2, 'which has not run 99 ms later');
  t.notOk(chained());
  await clock.advance(1);
  await settleIo(() => chained() && rechained.length === 1);
  t.ok(chained(), 'chained 100 ms after the rescan');
  t.same(rechained, [join(conf, '10-aws.conflist')]);
  t.match(keeper.status(), { state: 'chained', file: '10-aws.conflist', rechains: 1 });
  keeper.close();
  t.equal(clock.waiting, 0, 'close() cancels the rescan and any debounced check');
});
