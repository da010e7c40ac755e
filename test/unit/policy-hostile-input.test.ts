/**
 * Hostile objects: valid objects of every kind the engine reads with random values put at random
 * places (null, numbers, strings, lists, maps, prototype-member keys). The engine never throws for
 * one object: an invalid policy is reported (with its kind and name) and the others keep working.
 */
import t from 'tap';
import { PolicyEngine, UnknownEndpointError } from '../../daemon/policy/engine.js';
import { parseManifests } from '../../daemon/manifests.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { rng, type Rng } from './policy-core-helpers.js';

const BASE = parseManifests(`
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {ns: x}, annotations: {networkpolicy.antrea.io/enable-logging: "true"}}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {node: one}}
status: {addresses: [{type: InternalIP, address: 192.168.0.1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x, labels: {pod: a}}
spec: {nodeName: n1, serviceAccountName: sa, containers: [{name: c, ports: [{name: web, containerPort: 80, protocol: TCP}]}]}
status: {podIP: 10.0.0.1, podIPs: [{ip: 10.0.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: x}
spec: {clusterIP: 10.96.0.1, selector: {pod: a}, ports: [{port: 80, targetPort: web, protocol: TCP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: s-1, namespace: x, labels: {kubernetes.io/service-name: s}}
endpoints: [{addresses: [10.0.0.1], targetRef: {kind: Pod, name: a, namespace: x}}]
ports: [{name: "", port: 80, protocol: TCP}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress: [{from: [{podSelector: {}}, {ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}], ports: [{port: web}, {port: 80, endPort: 90}]}]
  egress: [{to: [{namespaceSelector: {matchExpressions: [{key: ns, operator: In, values: [x]}]}}]}]
---
apiVersion: crd.antrea.io/v1beta1
kind: Tier
metadata: {name: t1}
spec: {priority: 10}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg}
spec: {podSelector: {matchLabels: {pod: a}}, namespaceSelector: {}}
---
apiVersion: crd.antrea.io/v1beta1
kind: Group
metadata: {name: g, namespace: x}
spec: {childGroups: [h]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: acnp}
spec:
  tier: t1
  priority: 5
  appliedTo: [{group: cg}]
  ingress: [{action: Drop, name: r1, from: [{namespaces: {sameLabels: [ns]}}], ports: [{port: 80, sourcePort: 1000, sourceEndPort: 2000}]}]
  egress: [{action: Allow, to: [{fqdn: "*.example.com"}], protocols: [{icmp: {icmpType: 8}}]}, {action: Drop, toServices: [{name: s, namespace: x}]}]
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: annp, namespace: x}
spec:
  priority: 3
  appliedTo: [{podSelector: {}}]
  ingress: [{action: Reject, from: [{group: g}, {serviceAccount: {name: sa, namespace: x}}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: anp}
spec:
  priority: 10
  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {pod: a}}}}
  ingress: [{action: Pass, from: [{namespaces: {}}], ports: [{portRange: {protocol: TCP, start: 80, end: 90}}, {namedPort: web}]}]
  egress: [{action: Deny, to: [{networks: [10.0.0.0/8]}, {nodes: {matchLabels: {node: one}}}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{pods: {namespaceSelector: {}, podSelector: {}}}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: cnp}
spec:
  tier: Admin
  priority: 1
  subject: {namespaces: {}}
  egress: [{action: Accept, to: [{domainNames: [example.com]}], protocols: [{tcp: {destinationPort: {range: {start: 80, end: 90}}}}, {destinationNamedPort: web}]}]
`);

const HOSTILE: unknown[] = [null, 0, -1, 1.5, 1e300, '', 'x', '__proto__', 'constructor', true, [], [null], [1, 'a'], {}, { constructor: 'x' }, { toString: 1 }, { __proto__x: [] }, [{}], { matchLabels: [] }];

/** A copy of `o` with one randomly chosen node (a map value or list item) replaced. */
function mutate(r: Rng, o: unknown): unknown {
  const copy = JSON.parse(JSON.stringify(o));
  const slots: { parent: any; key: string | number }[] = [];
  const walk = (v: any) => {
    if (Array.isArray(v)) v.forEach((x, i) => { slots.push({ parent: v, key: i }); walk(x); });
    else if (v && typeof v === 'object') for (const k of Object.keys(v)) { if (k !== 'name' || v !== copy.metadata) slots.push({ parent: v, key: k }); walk(v[k]); }
  };
  walk(copy);
  const slot = r.pick(slots);
  const value = JSON.parse(JSON.stringify(r.pick(HOSTILE)) ?? 'null');
  if (r.int(4) === 0 && typeof slot.key === 'string') Object.defineProperty(slot.parent, r.pick(['constructor', 'toString', 'valueOf', '__proto__']), { value, enumerable: true, writable: true, configurable: true });
  else slot.parent[slot.key] = value;
  return copy;
}

t.test('no object, however malformed, makes the engine throw; the valid ones keep working', async (t) => {
  const r = rng(424242);
  let reported = 0;
  for (let i = 0; i < 1500; i++) {
    const engine = new PolicyEngine();
    for (const o of BASE) engine.upsert(o);
    const victim = r.pick(BASE);
    const bad = mutate(r, victim) as KubeObject;
    try {
      engine.upsert(bad);
      engine.evaluate({ from: 'x/a', to: 'x/a', port: 80, protocol: 'TCP' });
      engine.evaluate({ from: 'ip:10.9.9.9', to: 'service:x/s', port: 80, protocol: 'TCP' });
      engine.nodeRuleSet();
      if (engine.errors().some((e) => e.name === victim.metadata.name)) reported++;
      engine.remove({ apiVersion: victim.apiVersion, kind: victim.kind, name: victim.metadata.name, ...(victim.metadata.namespace ? { namespace: victim.metadata.namespace } : {}) });
    } catch (err) {
      if (err instanceof UnknownEndpointError) continue; // the Pod or Service itself was made unusable
      t.fail(`iteration ${i}: ${(err as Error).stack}`, { object: JSON.stringify(bad) });
      return;
    }
  }
  t.ok(reported > 100, `malformed policies are reported as invalid (${reported} of 1500)`);
});
