/**
 * The Pod adopter (daemon/node/adopter.ts) over a runtime's CNI cache directory and fakes for the API
 * server, the attacher and the Events: Pods with a usable cache entry are attached under the
 * exclusive lock, the others named once while it lasts, and calls while one runs fold into one more.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import type { NodePod } from '../../daemon/node/adoption.js';
import { PodAdopter } from '../../daemon/node/adopter.js';
import type { PodAttachment } from '../../daemon/node/attachment.js';
import { PodRegistry } from '../../daemon/node/pod-registry.js';
import type { PodRequest } from '../../daemon/cni/server.js';
import { SharedExclusiveLock } from '../../daemon/lock.js';
import { libcniFile } from './cni-fixtures.js';
import { ManualClock } from './manual-clock.js';

function setUp(t: { teardown(fn: () => void): void }) {
  const cacheDir = mkdtempSync(join(tmpdir(), 'sluice-adopter-'));
  t.teardown(() => rmSync(cacheDir, { recursive: true, force: true }));
  mkdirSync(join(cacheDir, 'results'));
  // web-1 has a cached result with a live namespace; web-2 has none.
  writeFileSync(join(cacheDir, 'results', 'aws-cni-c1-eth0'), libcniFile({ id: 'c1', ip: '10.0.1.5', ns: 'shop', name: 'web-1' }));
  const world = {
    nodePods: [
      { namespace: 'shop', name: 'web-1', ips: ['10.0.1.5'] },
      { namespace: 'shop', name: 'web-2', ips: ['10.0.1.6'] },
    ] as NodePod[],
    lists: 0,
    /** When set, listing the node's Pods waits for it. */
    listGate: undefined as Promise<void> | undefined,
    attached: [] as PodRequest[],
    exclusiveWhileAttaching: [] as boolean[],
    events: [] as string[],
  };
  const lock = new SharedExclusiveLock();
  const pods = new PodRegistry();
  const adopter = new PodAdopter({
    nodeName: 'node-1',
    cniCacheDir: cacheDir,
    log: pino({ level: 'silent' }),
    clock: new ManualClock(),
    api: () => ({
      nodePodNetworkPods: async () => {
        world.lists++;
        if (world.listGate) await world.listGate;
        return world.nodePods;
      },
    }),
    ready: () => true,
    pods,
    lock,
    attach: async (req) => {
      // A CNI operation asking for the shared lock now must wait: the adoption holds it exclusively.
      let shared = false;
      void lock.runShared(async () => void (shared = true));
      await new Promise<void>((r) => setImmediate(r));
      world.exclusiveWhileAttaching.push(!shared);
      world.attached.push(req);
      const a = { containerId: req.containerId, hostVeth: 'eni-c1', ips: ['10.0.1.5'] } as PodAttachment;
      pods.add(a);
      return a;
    },
    events: {
      record: async (obj, type, reason) => void world.events.push(`${type} ${reason} ${obj.namespace}/${obj.name}`),
    },
    pathExists: () => true,
  });
  return { adopter, world };
}

t.test('a Pod with a usable cache entry is attached under the exclusive lock; one without is named once while it lasts', async (t) => {
  const { adopter, world } = setUp(t);
  await adopter.adoptUnattached('agent start');
  t.same(world.attached.map((r) => [r.containerId, r.podNamespace, r.podName, r.netns]), [['c1', 'shop', 'web-1', '/var/run/netns/cni-c1']]);
  t.same(world.exclusiveWhileAttaching, [true], 'no CNI operation runs while a Pod is adopted');
  t.same(world.events, ['Normal SluiceAdopted shop/web-1', 'Warning SluiceNotEnforced shop/web-2']);
  t.match(adopter.status(), { adopted: 1, unattached: [{ pod: 'shop/web-2', reason: /no CNI result for 10.0.1.6 is cached/ }], lastRun: { reason: 'agent start' } });

  await adopter.adoptUnattached('periodic resync');
  t.equal(world.attached.length, 1, 'an attached Pod is not adopted again');
  t.equal(world.events.length, 2, 'web-2 is not reported again while it lasts');

  world.nodePods = [world.nodePods[0]!];
  await adopter.adoptUnattached('periodic resync');
  t.same(adopter.status().unattached, [], 'gone: no longer listed');
  world.nodePods.push({ namespace: 'shop', name: 'web-2', ips: ['10.0.1.6'] });
  await adopter.adoptUnattached('periodic resync');
  t.same(world.events.slice(2), ['Warning SluiceNotEnforced shop/web-2'], 'back: reported again');
});

t.test('calls while a run goes on fold into one more run, for the last reason; close() starts no more', async (t) => {
  const { adopter, world } = setUp(t);
  let release!: () => void;
  world.listGate = new Promise((r) => (release = r));
  const first = adopter.adoptUnattached('agent start');
  const again = [adopter.adoptUnattached('re-chained 10-aws.conflist'), adopter.adoptUnattached('periodic resync')];
  t.equal(world.lists, 1, 'one run at a time');
  world.listGate = undefined;
  release();
  await Promise.all([first, ...again]);
  // The folded run starts as the first ends (its callers were answered with the first run).
  await adopter.settled();
  t.equal(world.lists, 2, 'the two calls made meanwhile: one more run');
  t.equal(adopter.status().lastRun?.reason, 'periodic resync', 'for the last reason');
  adopter.close();
  await adopter.adoptUnattached('after close');
  t.equal(world.lists, 2, 'closed: nothing listed');
});
