/**
 * The agent's Kubernetes Events (daemon/node/events.ts) against a fake API server and a manual
 * clock: invalid-policy Events once per object and problem while it lasts (again after a fix and a
 * new break), on the 10 s schedule the agent runs them on; attach-failure Events at most one per
 * Pod a minute; a failure to record an Event is logged, not thrown.
 */
import { pino } from 'pino';
import t from 'tap';
import type { EventSubject } from '../../daemon/kube/node-api.js';
import { type EventSink, type EventType, type InvalidPolicy, NodeEvents, attachFailedEventDue, invalidPolicyEventsDue } from '../../daemon/node/events.js';
import { NodeSchedules } from '../../daemon/node/schedules.js';
import { ManualClock } from './manual-clock.js';

const log = pino({ level: 'silent' });

interface Sent {
  obj: EventSubject;
  type: EventType;
  reason: string;
  message: string;
}

class FakeSink implements EventSink {
  sent: Sent[] = [];
  failing = false;
  async objectEvent(nodeName: string, obj: EventSubject, type: EventType, reason: string, message: string): Promise<void> {
    if (this.failing) throw new Error('events is forbidden: User "system:serviceaccount:kube-system:sluice" cannot create resource "events"');
    this.sent.push({ obj, type, reason, message: `${nodeName}: ${message}` });
  }
}

const badPort: InvalidPolicy = { kind: 'NetworkPolicy', namespace: 'shop', name: 'web', field: 'spec.ingress[0].ports[0].port', message: 'port 70000 is out of range' };
const badCidr: InvalidPolicy = { kind: 'ClusterNetworkPolicy', name: 'deny-all', field: 'spec.egress[0].to[0].ipBlock.cidr', message: '"10.0.0.0/33" is not a CIDR' };

/** An agent's Events and the schedule that reports invalid policies, over fakes. */
function setUp() {
  const clock = new ManualClock();
  const sink = new FakeSink();
  const world = { invalid: undefined as InvalidPolicy[] | undefined, api: true };
  const events = new NodeEvents({
    nodeName: 'node-1',
    clock,
    log,
    sink: () => (world.api ? sink : undefined),
    policies: {
      invalidPolicies: () => world.invalid,
      // The engine's ClusterNetworkPolicy is Antrea's, named as kubectl describe selects it.
      policyObject: (e) => (e.kind === 'ClusterNetworkPolicy' ? { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: e.name, uid: 'u-1' } : undefined),
    },
  });
  const schedules = new NodeSchedules({
    clock,
    work: { resync: async () => [], checkFlows: async () => undefined, adoptUnattached: async () => undefined, reportInvalidPolicies: () => events.reportInvalidPolicies(), collectIfQuiet: () => undefined },
    resyncIntervalMs: 60_000,
    flowCheckIntervalMs: 5000,
  });
  return { clock, sink, world, events, schedules };
}

t.test('invalid policies: one Event per object and problem while it lasts; again once fixed and broken again', async (t) => {
  const { clock, sink, world, schedules } = setUp();
  world.invalid = [badPort];
  schedules.start();
  await clock.advance(0);
  t.equal(sink.sent.length, 1, 'reported at start');
  t.match(sink.sent[0], { obj: { kind: 'NetworkPolicy', namespace: 'shop', name: 'web' }, type: 'Warning', reason: 'SluiceInvalidPolicy', message: 'node-1: ignored by sluice-agent on node-1 (no rule of it is enforced): spec.ingress[0].ports[0].port: port 70000 is out of range' });
  await clock.advance(60_000);
  t.equal(sink.sent.length, 1, 'not again while it lasts (six more looks)');

  world.invalid = [badPort, badCidr];
  await clock.advance(10_000);
  t.equal(sink.sent.length, 2, 'a second object: its own Event');
  t.same(sink.sent[1]!.obj, { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: 'deny-all', uid: 'u-1' }, 'under the API object behind the report entry (no namespace: the Event goes to "default")');

  world.invalid = [{ ...badPort, message: 'port 0 is out of range' }, badCidr];
  await clock.advance(10_000);
  t.equal(sink.sent.length, 3, 'the same object with another problem: reported');

  world.invalid = [badCidr];
  await clock.advance(10_000);
  t.equal(sink.sent.length, 3, 'fixed: nothing');
  world.invalid = [badPort, badCidr];
  await clock.advance(10_000);
  t.equal(sink.sent.length, 4, 'broken again: reported again');
  t.equal(sink.sent[3]!.message, sink.sent[0]!.message);
  await clock.advance(60_000);
  t.equal(sink.sent.length, 4);
  schedules.stop();
});

t.test('invalid policies: nothing is remembered without a report or an API server; reported once both are there', async (t) => {
  const { clock, sink, world, schedules } = setUp();
  world.api = false;
  world.invalid = [badPort];
  schedules.start();
  await clock.advance(20_000);
  t.equal(sink.sent.length, 0, 'no API server: no Event');
  world.api = true;
  world.invalid = undefined;
  await clock.advance(10_000);
  t.equal(sink.sent.length, 0, 'no report: no Event');
  world.invalid = [badPort];
  await clock.advance(10_000);
  t.equal(sink.sent.length, 1, 'both: the problem is reported');
  schedules.stop();
});

t.test('invalidPolicyEventsDue (pure): what the last report held is not due; the returned set is what to remember', async (t) => {
  const first = invalidPolicyEventsDue(new Set(), [badPort, badCidr]);
  t.same(first.due, [badPort, badCidr]);
  const second = invalidPolicyEventsDue(first.reported, [badCidr]);
  t.same(second.due, []);
  t.equal(second.reported.size, 1, 'the fixed one is forgotten');
  t.same(invalidPolicyEventsDue(second.reported, [badCidr, badPort]).due, [badPort], 'so it is due again when it comes back');
});

t.test('attach failures: at most one Event per Pod a minute; another Pod has its own', async (t) => {
  const { clock, sink, events } = setUp();
  const fail = (name: string) => events.attachFailed({ podNamespace: 'shop', podName: name }, Object.assign(new Error('no veth with a peer in the Pod'), { details: 'netns /var/run/netns/cni-1' }));
  fail('web-1');
  await clock.advance(0);
  t.equal(sink.sent.length, 1);
  t.match(sink.sent[0], { obj: { kind: 'Pod', namespace: 'shop', name: 'web-1' }, type: 'Warning', reason: 'SluiceAttachFailed', message: /could not attach the Pod's network \(the runtime retries\): no veth with a peer in the Pod \(netns \/var\/run\/netns\/cni-1\)/ });
  for (let i = 0; i < 6; i++) {
    await clock.advance(10_000);
    fail('web-1');
  }
  await clock.advance(0);
  t.equal(sink.sent.length, 1, 'retries every 10 s for a minute: no other Event');
  fail('web-2');
  await clock.advance(0);
  t.equal(sink.sent.length, 2, 'another Pod: its own Event');
  await clock.advance(1);
  fail('web-1');
  await clock.advance(0);
  t.equal(sink.sent.length, 3, 'a minute after its last Event: one more');
  events.attachFailed({ podNamespace: 'shop' }, new Error('x'));
  events.attachFailed({}, new Error('x'));
  await clock.advance(0);
  t.equal(sink.sent.length, 3, 'a request that names no Pod: no Event');
});

t.test('attachFailedEventDue (pure): due again only once more than a minute went by', async (t) => {
  const a = attachFailedEventDue(new Map(), 'shop/web-1', 0);
  t.ok(a.due);
  t.notOk(attachFailedEventDue(a.sent, 'shop/web-1', 60_000).due, 'exactly a minute later: not yet');
  const later = attachFailedEventDue(a.sent, 'shop/web-1', 60_001);
  t.ok(later.due, 'after a minute: due');
  t.same([...attachFailedEventDue(a.sent, 'shop/web-2', 60_001).sent.keys()], ['shop/web-2'], 'entries older than a minute are dropped');
});

t.test('an Event the API server refuses is logged, not thrown', async (t) => {
  const { sink, events } = setUp();
  sink.failing = true;
  await t.resolves(events.record({ namespace: 'shop', name: 'web-1' }, 'Normal', 'SluiceAdopted', 'attached'));
  t.equal(sink.sent.length, 0);
});
