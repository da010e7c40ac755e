/**
 * NewPodGate (enforcement/newpods/gate.ts) on a manual clock with fake peers: who is asked, how long
 * an ADD waits, when a guard goes on and comes off, and that nothing hangs or leaks once closed.
 */
import t from 'tap';
import { GUARD_PEER_BUDGET, NewPodGate, type NewPodGateDeps, type NewPod } from '../../daemon/enforcement/newpods/gate.js';
import { ManualClock } from './manual-clock.js';

const POD: NewPod = { namespace: 'z', name: 'new', ips: ['10.1.0.9'] };

interface Peer {
  /** What an ask gets: an answer now, a rejection, or one that resolves when the test says. */
  answer: 'yes' | 'no' | 'unreachable' | 'held';
}

function setup(opts: { span?: Record<string, string[]>; peers?: Record<string, Peer>; publishFails?: boolean; addresses?: Record<string, string | undefined>; applyMs?: number } = {}) {
  const clock = new ManualClock();
  const span = new Map(Object.entries(opts.span ?? { 'node-2': ['10.2.0.5'], 'node-3': ['10.3.0.5', '10.3.0.6'], 'node-1': ['10.1.0.2'] }));
  const peers = opts.peers ?? {};
  const asked: string[] = [];
  const held = new Map<string, (v: boolean) => void>();
  let applies = 0;
  const published: NewPod[] = [];
  const warnings: string[] = [];
  const ended: string[] = [];
  const deps: NewPodGateDeps = {
    nodeName: 'node-1',
    span: () => span,
    peerAddress: (node) => (opts.addresses && node in opts.addresses ? opts.addresses[node] : `addr-${node}`),
    publish: async (pod) => {
      if (opts.publishFails) throw new Error('API unreachable');
      published.push(pod);
    },
    ask: (address, _pod, waitMs) => {
      const node = address.replace(/^addr-/, '');
      asked.push(node);
      const p = peers[node] ?? { answer: 'yes' };
      if (p.answer === 'yes') return Promise.resolve(true);
      if (p.answer === 'unreachable') return Promise.reject(new Error('ECONNREFUSED'));
      if (p.answer === 'no') return new Promise((resolve) => clock.setTimeout(() => resolve(false), waitMs));
      return new Promise((resolve) => held.set(node, resolve));
    },
    applyFlows: async () => {
      applies++;
      // An apply takes time on a real bridge: what happens meanwhile waits for the next one.
      if (opts.applyMs) await new Promise((resolve) => clock.setTimeout(() => resolve(undefined), opts.applyMs!));
    },
    clock,
    log: { info: () => undefined, warn: (_o, m) => warnings.push(m) },
    confirmWithinMs: 2000,
    backgroundWaitMs: 10_000,
    guardEnded: (pod) => ended.push(`${pod.namespace}/${pod.name}`),
  };
  const gate = new NewPodGate(deps);
  t.teardown(() => gate.close());
  return { gate, clock, span, peers, asked, held, published, warnings, ended, applies: () => applies };
}

t.test('every node of the span confirms: no guard, no flow change, this node is not asked', async (t) => {
  const s = setup();
  const out = await s.gate.admit(POD);
  t.same(out.span, ['node-2', 'node-3'], 'the span without this node');
  t.same(out.guarded, []);
  t.equal(out.published, true);
  t.same(s.published, [POD], 'the addresses were published');
  t.same(s.asked.sort(), ['node-2', 'node-3']);
  t.equal(s.applies(), 0, 'no flows applied');
  t.same(s.gate.guarded(), []);
});

t.test('an unreachable agent is asked again within the bound, then guarded; a yes lifts the guard', async (t) => {
  const s = setup({ peers: { 'node-3': { answer: 'unreachable' } } });
  const admitted = s.gate.admit(POD);
  let done = false;
  void admitted.then(() => (done = true));
  await s.clock.advance(1900);
  t.notOk(done, 'the ADD still waits before the bound');
  t.ok(s.asked.filter((n) => n === 'node-3').length >= 4, 'node-3 was asked again (100 ms apart, doubling)');
  await s.clock.advance(200);
  const out = await admitted;
  t.same(out.guarded, ['node-3']);
  t.equal(s.applies(), 1, 'the guard was applied before the ADD answered');
  t.same(s.gate.guarded(), [{ podIps: ['10.1.0.9'], peerIps: ['10.3.0.5', '10.3.0.6'] }], 'guarded from node-3\'s span Pods only');
  t.match(s.gate.status(), { guardedPods: [{ pod: 'z/new', nodes: ['node-3'], peers: 2, whole: false }], guarded: 1, lifted: 0 });
  t.match(s.warnings, [/did not confirm/]);
  t.ok(s.gate.guarding('z', 'new'));
  t.same(s.ended, [], 'the guard has not ended');
  // node-3's agent comes back and answers yes.
  s.peers['node-3'] = { answer: 'yes' };
  await s.clock.advance(6000);
  t.same(s.gate.guarded(), [], 'lifted');
  t.notOk(s.gate.guarding('z', 'new'));
  t.same(s.ended, ['z/new'], 'the end of its last guard is told');
  t.equal(s.applies(), 2, 'and the lift applied');
  t.match(s.gate.status(), { guardedPods: [], lifted: 1 });
  const asks = s.asked.length;
  await s.clock.advance(60_000);
  t.equal(s.asked.length, asks, 'nobody is asked any more');
});

t.test('a node that answers no is asked again by long polls until yes', async (t) => {
  const s = setup({ peers: { 'node-2': { answer: 'no' } } });
  const admitted = s.gate.admit(POD);
  await s.clock.advance(2000);
  t.same((await admitted).guarded, ['node-2']);
  await s.clock.advance(25_000);
  t.ok(s.asked.filter((n) => n === 'node-2').length >= 3, 'asked again after each long poll');
  t.same(s.gate.guarded().length, 1, 'still guarded');
  s.peers['node-2'] = { answer: 'yes' };
  await s.clock.advance(10_000);
  t.same(s.gate.guarded(), [], 'lifted once it says yes');
});

t.test('a node that leaves the span, or a Pod that goes, ends the guard', async (t) => {
  const s = setup({ peers: { 'node-3': { answer: 'unreachable' } } });
  const admitted = s.gate.admit(POD);
  await s.clock.advance(2000);
  await admitted;
  t.equal(s.gate.guarded().length, 1);
  s.span.delete('node-3');
  t.same(s.gate.guarded(), [], 'nothing to guard once node-3 has no span Pods');
  await s.clock.advance(6000);
  t.match(s.gate.status(), { guardedPods: [], lifted: 1 }, 'the follow-up sees it left the span');

  const s2 = setup({ peers: { 'node-3': { answer: 'unreachable' } } });
  const a2 = s2.gate.admit(POD);
  await s2.clock.advance(2000);
  await a2;
  s2.gate.forget('z', 'new');
  t.same(s2.gate.guarded(), [], 'a deleted Pod has no guard');
  const asks = s2.asked.length;
  await s2.clock.advance(60_000);
  t.equal(s2.asked.length, asks, 'and its node is no longer asked');
});

t.test('a failed publication is reported and does not stop the questions', async (t) => {
  const s = setup({ publishFails: true });
  const out = await s.gate.admit(POD);
  t.equal(out.published, false);
  t.same(out.guarded, [], 'the nodes learnt the Pod otherwise and said yes');
  t.match(s.gate.status(), { publishFailures: 1 });
  t.match(s.warnings, [/could not be published/]);
});

t.test('a node without a known address is guarded; an empty span asks nobody', async (t) => {
  const s = setup({ addresses: { 'node-2': undefined } });
  const admitted = s.gate.admit(POD);
  await s.clock.advance(2000);
  t.same((await admitted).guarded, ['node-2']);

  const s2 = setup({ span: {} });
  const out = await s2.gate.admit(POD);
  t.same(out, { span: [], guarded: [], published: true, ms: 0 }, 'nothing asked, no time spent');
});

t.test('close ends waiting ADDs (nothing hangs)', async (t) => {
  const s = setup({ peers: { 'node-2': { answer: 'unreachable' } } });
  const admitted = s.gate.admit(POD);
  await s.clock.advance(300);
  s.gate.close();
  const out = await admitted;
  t.same(out.guarded, ['node-2'], 'a closing agent answers with the node guarded');
  t.equal(s.clock.waiting, 0, 'no timer left');
});

t.test('a reused address: the previous owner\'s span is asked and guarded too', async (t) => {
  const s = setup({ span: { 'node-2': ['10.2.0.5'] }, peers: { 'node-4': { answer: 'unreachable' } } });
  const admitted = s.gate.admit(POD, new Map([['node-4', ['10.4.0.5']], ['node-1', ['10.1.0.3']]]));
  await s.clock.advance(2000);
  const out = await admitted;
  t.same(out.span, ['node-2', 'node-4'], 'the previous owner\'s nodes join the span (this node aside)');
  t.same(out.guarded, ['node-4']);
  t.same(s.gate.guarded(), [{ podIps: ['10.1.0.9'], peerIps: ['10.4.0.5'] }], 'guarded from the Pods whose rules named the previous owner');
});

t.test('a guard with more peers than the budget cuts the Pod off whole, and goes back to pairs as nodes confirm', async (t) => {
  const many = Array.from({ length: GUARD_PEER_BUDGET - 10 }, (_, i) => `10.3.${i >> 8}.${i & 255}`);
  const s = setup({
    span: { 'node-3': many, 'node-4': Array.from({ length: 20 }, (_, i) => `10.4.0.${i}`), 'node-5': ['10.5.0.1'] },
    peers: { 'node-3': { answer: 'unreachable' }, 'node-4': { answer: 'unreachable' }, 'node-5': { answer: 'unreachable' } },
  });
  const admitted = s.gate.admit(POD);
  await s.clock.advance(2100);
  t.same((await admitted).guarded, ['node-3', 'node-4', 'node-5']);
  t.same(s.gate.guarded(), [{ podIps: ['10.1.0.9'], peerIps: [], all: true }], `${many.length + 21} peers: every new connection of the Pod is dropped, not each pair`);
  t.match(s.gate.status(), { guardedPods: [{ pod: 'z/new', peers: GUARD_PEER_BUDGET + 1, whole: true }] }, 'peers counted up to one over the budget');
  // node-4 confirms: 10 + 1 peers under the budget are guarded pair by pair.
  s.peers['node-4'] = { answer: 'yes' };
  await s.clock.advance(6000);
  const [g] = s.gate.guarded();
  t.equal(g?.all, undefined, 'under the budget: pairs again');
  t.equal(g?.peerIps.length, many.length + 1);
  t.match(s.gate.status(), { guardedPods: [{ nodes: ['node-3', 'node-5'], whole: false }] });
  t.same(s.ended, [], 'still guarded');
});

t.test('many nodes confirming at once: their lifts share the applies', async (t) => {
  const nodes = Array.from({ length: 50 }, (_, i) => `node-${i + 10}`);
  const s = setup({ span: Object.fromEntries(nodes.map((n, i) => [n, [`10.9.0.${i}`]])), peers: Object.fromEntries(nodes.map((n) => [n, { answer: 'no' as const }])), applyMs: 5 });
  const admitted = s.gate.admit(POD);
  await s.clock.advance(2010);
  t.equal((await admitted).guarded.length, 50, 'every node lags');
  const afterGuard = s.applies();
  t.equal(afterGuard, 1, 'the guard went on with one apply');
  // The background long polls end together; every node answers yes to the next question.
  for (const n of nodes) s.peers[n] = { answer: 'yes' };
  await s.clock.advance(10_100);
  t.same(s.gate.guarded(), [], 'every guard lifted');
  t.same(s.ended, ['z/new']);
  const lifts = s.applies() - afterGuard;
  t.ok(lifts >= 1 && lifts <= 2, `50 lifts took ${lifts} applies (one under way, one for the lifts made meanwhile), not 50`);
});
