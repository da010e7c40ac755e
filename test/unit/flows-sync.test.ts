/** FlowSync against a fake bridge: one bundle per sync, remembered state, verify, coalescing, failures. */
import t from 'tap';
import { pino } from 'pino';
import { bundleText, type FlowDiff } from '../../daemon/flows/diff.js';
import type { Flow } from '../../daemon/flows/flow.js';
import type { FlowProgrammer } from '../../daemon/ovs/flow-programmer.js';
import { FlowSync } from '../../daemon/flows/sync.js';
import { computeFlows } from '../../daemon/flows/pipeline.js';
import type { FlowStore } from '../../daemon/flows/store.js';

class FakeBridge {
  cookies = new Set<string>();
  dumps = 0;
  bundles: string[] = [];
  failNext = false;
  async installedCookies() {
    this.dumps++;
    return [...this.cookies];
  }
  async applyDiff(diff: FlowDiff) {
    const text = bundleText(diff);
    await new Promise((r) => setTimeout(r, 5));
    if (this.failNext) {
      this.failNext = false;
      throw new Error('bundle rejected');
    }
    this.bundles.push(text);
    for (const line of text.trim().split('\n')) {
      const del = /^delete cookie=(0x[0-9a-f]+)\/-1$/.exec(line);
      if (del) this.cookies.delete(del[1]!);
      const add = /^add .*cookie=(0x[0-9a-f]+)/.exec(line);
      if (add) this.cookies.add(add[1]!);
    }
    return { bundleMs: 5, purgeMs: 0 };
  }
}

/** The update a sync runs: one owner states these flows. */
const own = (list: Flow[]) => (store: FlowStore) => {
  store.replace('all', list);
};

const flows = (pods: number): Flow[] =>
  computeFlows({
    gatewayOfport: 32769,
    gatewayMac: '0a:00:00:00:00:01',
    serviceCIDRs: ['10.96.0.0/16'],
    pods: Array.from({ length: pods }, (_, i) => ({ containerId: `c${i}`, ofport: i + 1, mac: '2a:00:00:00:00:01', ips: [`10.1.0.${i + 10}`] })),
  });

t.test('first sync dumps, later syncs trust the remembered state; verify dumps again', async (t) => {
  const br = new FakeBridge();
  const sync = new FlowSync(br as unknown as FlowProgrammer, pino({ level: 'silent' }));
  const d1 = await sync.sync(own(flows(1)));
  t.equal(br.dumps, 1);
  t.equal(d1.add.length, flows(1).length);
  const d2 = await sync.sync(own(flows(2)));
  t.equal(br.dumps, 1, 'no dump for an incremental change');
  t.equal(d2.add.length, flows(2).length - flows(1).length);
  t.equal(br.bundles.length, 2);
  br.cookies.clear(); // ovs-vswitchd restarted behind our back
  const stale = await sync.sync(own(flows(2)));
  t.equal(stale.add.length, 0, 'memory alone does not see it');
  const verified = await sync.sync(own(flows(2)), { verify: true });
  t.equal(verified.add.length, flows(2).length, 'verify re-installs everything');
  t.same([...br.cookies].sort(), flows(2).map((f) => f.cookie).sort());
});

t.test('concurrent callers share one sync; a failed bundle makes the next sync dump', async (t) => {
  const br = new FakeBridge();
  const sync = new FlowSync(br as unknown as FlowProgrammer, pino({ level: 'silent' }));
  let pods = 1;
  await sync.sync(own(flows(pods)));
  pods = 3;
  const results = await Promise.all([sync.sync(own(flows(pods))), sync.sync(own(flows(pods))), sync.sync(own(flows(pods)))]);
  t.equal(br.bundles.length, 2, 'the three calls made one bundle after the first');
  t.same([...br.cookies].sort(), flows(3).map((f) => f.cookie).sort());
  t.equal(results[1], results[2], 'the queued callers got the same result');
  br.failNext = true;
  pods = 4;
  await t.rejects(sync.sync(own(flows(pods))), /bundle rejected/);
  const dumps = br.dumps;
  await sync.sync(own(flows(pods)));
  t.equal(br.dumps, dumps + 1, 'after a failure the state is read from the bridge again');
  t.same([...br.cookies].sort(), flows(4).map((f) => f.cookie).sort());
});
