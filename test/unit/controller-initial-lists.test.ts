/**
 * The controller while its initial lists come in (ClusterComputation.hold, the engine's changes
 * held as one): no Node's view holds anything and no realization question is answered, since an
 * answer names view versions that would not hold the Pod yet; at the release the views are made
 * and a question waiting meanwhile is answered.
 */
import t from 'tap';
import { perNodeSink } from '../../daemon/controller/computation.js';
import { PolicyController } from '../../daemon/controller/controller.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { namespace, netpol, node, pod } from './policy-core-helpers.js';

t.test('while the initial lists are held: no view, no realization answer; at the release both', async (t) => {
  const views = new Map<string, Set<string>>();
  const sink = perNodeSink({
    set(n, kind, name, object) {
      let v = views.get(n);
      if (!v) views.set(n, (v = new Set()));
      if (object) v.add(`${kind}/${name}`);
      else v.delete(`${kind}/${name}`);
    },
  });
  const controller = new PolicyController({ log: { warn: () => {}, error: () => {} }, sink });
  t.teardown(() => controller.close());
  controller.computation.hold();
  const feed = (o: KubeObject) => controller.onWatchEvent({ type: 'upsert', object: o });
  feed(node('node-1', '172.18.0.1'));
  feed(node('node-2', '172.18.0.2'));
  feed(namespace('x'));
  feed(netpol('x', 'from-b', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] }));
  feed(pod('x', 'a', { node: 'node-1', ip: '10.244.1.10' }));
  feed(pod('x', 'b', { node: 'node-2', ip: '10.244.1.11' }));
  const question = { namespace: 'x', name: 'b', ips: ['10.244.1.11'] };

  t.equal(controller.engine.cluster.pods.has('x/b'), true, 'the engine holds the Pod');
  t.equal(views.size, 0, 'no Node has a view yet');
  t.equal(controller.podRealization(question), undefined, 'no answer while held');
  const waiting = controller.whenPodRealized(question, 5_000);

  controller.computation.release();
  controller.poke();
  t.same([...(views.get('node-1') ?? [])].map((k) => k.split('/')[0]).sort(), ['AddressGroup', 'AppliedToGroup', 'NetworkPolicy'], 'node-1\'s view is made at the release: the policy and its two groups');
  const answer = await waiting;
  t.ok(answer, 'the waiting question is answered at the release');
  t.equal(answer?.node, 'node-2', 'the Pod\'s own Node');
  t.same(answer?.nodes.map((n) => n.name), ['node-1', 'node-2'], 'and node-1, whose rule names it as a peer');
  t.same(answer?.nodes.find((n) => n.name === 'node-1')?.podIps, ['10.244.1.10'], 'with the address of the Pod there that the rule applies to');
});
