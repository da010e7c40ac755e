// Expectations of the upstream network-policy-api conformance suite (kubernetes-sigs/network-policy-api,
// conformance/tests: the AdminNetworkPolicy Integration, PriorityField, Gress, EgressInlineCIDRPeers,
// EgressNodePeers and EgressNamedPort cases), restated as data: the "houses" model, the policies of
// each case, the mutations the case makes, and each probe's expected outcome. Every case runs twice,
// once as v1alpha1 ANP/BANP and once converted to v1alpha2 ClusterNetworkPolicy.
import t from 'tap';
import type { KubeObject } from '../../daemon/policy/types.js';
import { engineWith, toClusterNetworkPolicy } from './policy-admin-model.js';

const NS_PREFIX = 'network-policy-conformance-';
const HOUSES = { gryffindor: 'harry-potter', slytherin: 'draco-malfoy', hufflepuff: 'cedric-diggory', ravenclaw: 'luna-lovegood' } as const;
type House = keyof typeof HOUSES;

/** "gryffindor-0" → "network-policy-conformance-gryffindor/harry-potter-0"; "centaur" → the host-network Pod. */
function ep(short: string): string {
  if (short === 'centaur') return `${NS_PREFIX}forbidden-forrest/centaur-1`;
  const [house, index] = short.split('-') as [House, string];
  return `${NS_PREFIX}${house}/${HOUSES[house]}-${index}`;
}

function housesModel(): KubeObject[] {
  const objs: KubeObject[] = [
    { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-1', labels: { 'kubernetes.io/os': 'linux' } }, status: { addresses: [{ type: 'InternalIP', address: '172.18.0.2' }] } },
    { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-2', labels: { 'kubernetes.io/os': 'linux' } }, status: { addresses: [{ type: 'InternalIP', address: '172.18.0.3' }] } },
  ];
  let n = 10;
  for (const [house, pod] of [...Object.entries(HOUSES), ['forbidden-forrest', 'centaur']] as [string, string][]) {
    objs.push({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: `${NS_PREFIX}${house}`, labels: { 'conformance-house': house } } });
    for (const i of [0, 1]) {
      const hostNetwork = house === 'forbidden-forrest';
      objs.push({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { namespace: `${NS_PREFIX}${house}`, name: `${pod}-${i}`, labels: { 'conformance-house': house } },
        spec: {
          nodeName: hostNetwork ? 'node-2' : 'node-1',
          hostNetwork,
          containers: [
            { name: 'web', ports: [{ name: 'web', containerPort: 80, protocol: 'TCP' }] },
            { name: 'dns', ports: [{ name: 'dns', containerPort: 53, protocol: 'UDP' }] },
          ],
        },
        status: { phase: 'Running', podIP: hostNetwork ? '172.18.0.3' : `10.244.1.${n++}` },
      });
    }
  }
  return objs;
}

const house = (h: string) => ({ matchLabels: { 'conformance-house': h } });
const houseByName = (h: string) => ({ matchLabels: { 'kubernetes.io/metadata.name': `${NS_PREFIX}${h}` } });
const housePods = (h: string) => ({ pods: { namespaceSelector: house(h), podSelector: house(h) } });
const tcp = (port: number) => ({ portNumber: { protocol: 'TCP', port } });
const udp = (port: number) => ({ portNumber: { protocol: 'UDP', port } });
const sctp = (port: number) => ({ portNumber: { protocol: 'SCTP', port } });

function anp(name: string, priority: number, spec: Record<string, unknown>): KubeObject {
  return { apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name }, spec: { priority, ...spec } };
}
function banp(spec: Record<string, unknown>): KubeObject {
  return { apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'BaselineAdminNetworkPolicy', metadata: { name: 'default' }, spec };
}

/** Returns a copy of `obj` with `f` applied to a deep copy of its spec. */
function edit(obj: KubeObject, f: (spec: any) => void): KubeObject {
  const spec = JSON.parse(JSON.stringify(obj.spec));
  f(spec);
  return { ...obj, spec };
}
function swap(list: unknown[], i: number, j: number): void {
  [list[i], list[j]] = [list[j], list[i]];
}

type Proto = 'TCP' | 'UDP' | 'SCTP';
/** [client, server, protocol, port, reachable] */
type ProbeRow = [string, string, Proto, number, boolean];
type Step = { apply: KubeObject[] } | { remove: KubeObject } | { expect: ProbeRow[] };

interface Case {
  name: string;
  steps: Step[];
}

// --- Integration: ANP Deny, then Pass to a NetworkPolicy, then (NetworkPolicy deleted) to the BANP.
const passExample = anp('pass-example', 10, {
  subject: { namespaces: house('gryffindor') },
  ingress: [{ name: 'deny-all-ingress-from-slytherin', action: 'Deny', from: [{ namespaces: house('slytherin') }] }],
  egress: [{ name: 'deny-all-egress-to-slytherin', action: 'Deny', to: [{ namespaces: house('slytherin') }] }],
});
const gryffindorNp: KubeObject = {
  apiVersion: 'networking.k8s.io/v1',
  kind: 'NetworkPolicy',
  metadata: { namespace: `${NS_PREFIX}gryffindor`, name: 'allow-gress-from-to-slytherin-to-gryffindor' },
  spec: {
    podSelector: {},
    policyTypes: ['Ingress', 'Egress'],
    ingress: [{ from: [{ namespaceSelector: house('slytherin') }] }],
    egress: [{ to: [{ namespaceSelector: house('slytherin') }] }],
  },
};
const denySlytherinBanp = banp({
  subject: { namespaces: house('gryffindor') },
  ingress: [{ name: 'deny-all-ingress-from-slytherin', action: 'Deny', from: [{ namespaces: house('slytherin') }] }],
  egress: [{ name: 'deny-all-egress-to-slytherin', action: 'Deny', to: [{ namespaces: house('slytherin') }] }],
});
const ingressPass = edit(passExample, (s) => (s.ingress[0].action = 'Pass'));
const bothPass = edit(ingressPass, (s) => (s.egress[0].action = 'Pass'));

// --- PriorityField: a Deny at 50 wins over a Pass at 60; moving the Pass to 40 hands over to the BANP Allow.
const priority50 = anp('priority-50-example', 50, {
  subject: housePods('gryffindor'),
  ingress: [{ name: 'deny-all-ingress-from-slytherin', action: 'Deny', from: [housePods('slytherin')] }],
  egress: [{ name: 'deny-all-egress-to-slytherin', action: 'Deny', to: [housePods('slytherin')] }],
});
const priority60 = anp('old-priority-60-new-priority-40-example', 60, {
  subject: housePods('gryffindor'),
  ingress: [{ name: 'pass-all-ingress-from-slytherin', action: 'Pass', from: [housePods('slytherin')] }],
  egress: [{ name: 'pass-all-egress-to-slytherin', action: 'Pass', to: [housePods('slytherin')] }],
});
const allowSlytherinBanp = banp({
  subject: housePods('gryffindor'),
  ingress: [{ name: 'allow-all-ingress-from-slytherin', action: 'Allow', from: [housePods('slytherin')] }],
  egress: [{ name: 'allow-all-egress-to-slytherin', action: 'Allow', to: [housePods('slytherin')] }],
});

// --- Gress: one ANP with ordered Allow/Deny/Pass rules per house, over TCP/UDP/SCTP.
const tripleA = [tcp(80), udp(53), sctp(9003)];
const gressRules = anp('gress-rules', 15, {
  subject: { namespaces: houseByName('gryffindor') },
  egress: [
    { name: 'allow-to-ravenclaw-everything', action: 'Allow', to: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-to-ravenclaw-everything', action: 'Deny', to: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'pass-to-ravenclaw-everything', action: 'Pass', to: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-to-slytherin-at-ports-80-53-9003', action: 'Deny', to: [{ namespaces: houseByName('slytherin') }], ports: tripleA },
    { name: 'pass-to-slytherin-at-port-80-53-9003', action: 'Pass', to: [{ namespaces: houseByName('slytherin') }], ports: tripleA },
    { name: 'allow-to-hufflepuff-at-ports-8080-5353-9003', action: 'Allow', to: [{ namespaces: houseByName('hufflepuff') }], ports: [tcp(8080), udp(5353), sctp(9003)] },
    { name: 'deny-to-hufflepuff-everything-else', action: 'Deny', to: [{ namespaces: houseByName('hufflepuff') }] },
  ],
  ingress: [
    { name: 'allow-from-ravenclaw-everything', action: 'Allow', from: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-from-ravenclaw-everything', action: 'Deny', from: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'pass-from-ravenclaw-everything', action: 'Pass', from: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-from-slytherin-at-port-80-53-9003', action: 'Deny', from: [{ namespaces: houseByName('slytherin') }], ports: tripleA },
    { name: 'pass-from-slytherin-at-port-80-53-9003', action: 'Pass', from: [{ namespaces: houseByName('slytherin') }], ports: tripleA },
    { name: 'allow-from-hufflepuff-at-port-80-5353-9003', action: 'Allow', from: [{ namespaces: houseByName('hufflepuff') }], ports: [tcp(80), udp(5353), sctp(9003)] },
    { name: 'deny-from-hufflepuff-everything-else', action: 'Deny', from: [{ namespaces: houseByName('hufflepuff') }] },
  ],
});
const gressDenyFirst = edit(gressRules, (s) => {
  swap(s.egress, 0, 1);
  swap(s.ingress, 0, 1);
});
const gressPassFirst = edit(gressDenyFirst, (s) => {
  swap(s.egress, 0, 2);
  swap(s.ingress, 0, 2);
});

// --- EgressInlineCIDRPeers: allow slytherin, deny the Internet (which includes other Pods).
const inlineCidr = anp('inline-cidr-as-peers-example', 85, {
  subject: housePods('gryffindor'),
  egress: [
    { name: 'allow-egress-to-slytherin', action: 'Allow', to: [housePods('slytherin')] },
    { name: 'deny-egress-to-internet', action: 'Deny', to: [{ networks: ['0.0.0.0/0', '::/0'] }] },
  ],
});
const POD_IP = (pod: string) => {
  const o = housesModel().find((x) => x.kind === 'Pod' && `${x.metadata.namespace}/${x.metadata.name}` === ep(pod))!;
  return o.status.podIP as string;
};
const inlineCidrWithPodIps = edit(inlineCidr, (s) => {
  s.egress.unshift({ name: 'allow-egress-to-specific-podIPs', action: 'Allow', to: [{ networks: [`${POD_IP('ravenclaw-0')}/32`, `${POD_IP('hufflepuff-0')}/32`] }] });
});

// --- EgressNodePeers: Allow/Pass/Deny to Node addresses (served by a host-network Pod).
const nodePeers = anp('node-and-cidr-as-peers-example', 75, {
  subject: housePods('gryffindor'),
  egress: [
    { name: 'allow-egress-to-36363-on-nodes', action: 'Allow', to: [{ nodes: { matchLabels: { 'kubernetes.io/os': 'linux' } } }], ports: [tcp(36363)] },
    { name: 'pass-egress-to-5353-on-nodes', action: 'Pass', to: [{ nodes: { matchLabels: { 'kubernetes.io/os': 'linux' } } }], ports: [udp(34345)] },
    {
      name: 'deny-egress-to-slytherin-and-nodes-and-internet',
      action: 'Deny',
      to: [housePods('slytherin'), { nodes: { matchLabels: { 'kubernetes.io/os': 'linux' } } }, { networks: ['0.0.0.0/0', '::/0'] }],
    },
  ],
});

// --- EgressNamedPort: the hufflepuff Allow rule of the egress-tcp case switched to the named port "web".
const egressTcp = anp('egress-tcp', 3, {
  subject: { namespaces: houseByName('gryffindor') },
  egress: [
    { name: 'allow-to-ravenclaw-everything', action: 'Allow', to: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-to-ravenclaw-everything', action: 'Deny', to: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'pass-to-ravenclaw-everything', action: 'Pass', to: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-to-slytherin-at-port-80', action: 'Deny', to: [{ namespaces: houseByName('slytherin') }], ports: [tcp(80)] },
    { name: 'pass-to-slytherin-at-port-80', action: 'Pass', to: [{ namespaces: houseByName('slytherin') }], ports: [tcp(80)] },
    { name: 'allow-to-hufflepuff-at-port-8080', action: 'Allow', to: [{ namespaces: houseByName('hufflepuff') }], ports: [tcp(8080)] },
    { name: 'deny-to-hufflepuff-everything-else', action: 'Deny', to: [{ namespaces: houseByName('hufflepuff') }] },
  ],
});
const egressNamedPort = edit(egressTcp, (s) => (s.egress[5].ports = [{ namedPort: 'web' }]));

// --- BaselineAdminNetworkPolicyGress: the same layout in the BANP (Allow/Deny only).
const banpGress = banp({
  subject: { namespaces: houseByName('gryffindor') },
  egress: [
    { name: 'allow-to-ravenclaw-everything', action: 'Allow', to: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-to-ravenclaw-everything', action: 'Deny', to: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-to-slytherin-at-ports-80-53-9003', action: 'Deny', to: [{ namespaces: houseByName('slytherin') }], ports: tripleA },
    { name: 'allow-to-hufflepuff-at-ports-8080-5353', action: 'Allow', to: [{ namespaces: houseByName('hufflepuff') }], ports: [tcp(8080), udp(5353), sctp(9003)] },
    { name: 'deny-to-hufflepuff-everything-else', action: 'Deny', to: [{ namespaces: houseByName('hufflepuff') }] },
  ],
  ingress: [
    { name: 'allow-from-ravenclaw-everything', action: 'Allow', from: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-from-ravenclaw-everything', action: 'Deny', from: [{ namespaces: houseByName('ravenclaw') }] },
    { name: 'deny-from-slytherin-at-port-80-53-9003', action: 'Deny', from: [{ namespaces: houseByName('slytherin') }], ports: tripleA },
    { name: 'allow-from-hufflepuff-at-port-80-5353-9003', action: 'Allow', from: [{ namespaces: houseByName('hufflepuff') }], ports: [tcp(80), udp(5353), sctp(9003)] },
    { name: 'deny-from-hufflepuff-everything-else', action: 'Deny', from: [{ namespaces: houseByName('hufflepuff') }] },
  ],
});
const banpGressDenyFirst = edit(banpGress, (s) => {
  swap(s.egress, 0, 1);
  swap(s.ingress, 0, 1);
});
// (Not in the upstream case.) A NetworkPolicy that selects gryffindor takes precedence over the BANP.
const gryffindorAllowAll: KubeObject = {
  apiVersion: 'networking.k8s.io/v1',
  kind: 'NetworkPolicy',
  metadata: { namespace: `${NS_PREFIX}gryffindor`, name: 'allow-all' },
  spec: { podSelector: {}, policyTypes: ['Ingress', 'Egress'], ingress: [{}], egress: [{}] },
};

const cases: Case[] = [
  {
    name: 'Integration: ANP Deny, Pass to NetworkPolicy, then to BANP',
    steps: [
      { apply: [passExample, gryffindorNp, denySlytherinBanp] },
      { expect: [['slytherin-0', 'gryffindor-0', 'TCP', 80, false], ['slytherin-1', 'gryffindor-0', 'TCP', 8080, false], ['gryffindor-0', 'slytherin-0', 'TCP', 80, false], ['gryffindor-1', 'slytherin-0', 'TCP', 8080, false]] },
      { apply: [ingressPass] },
      { expect: [['slytherin-0', 'gryffindor-0', 'TCP', 80, true], ['slytherin-1', 'gryffindor-0', 'TCP', 8080, true], ['gryffindor-0', 'slytherin-0', 'TCP', 80, false]] },
      { apply: [bothPass] },
      { expect: [['gryffindor-0', 'slytherin-0', 'TCP', 80, true], ['gryffindor-1', 'slytherin-0', 'TCP', 8080, true]] },
      { remove: gryffindorNp },
      { expect: [['slytherin-0', 'gryffindor-0', 'TCP', 80, false], ['slytherin-1', 'gryffindor-0', 'TCP', 8080, false], ['gryffindor-0', 'slytherin-0', 'TCP', 80, false], ['gryffindor-1', 'slytherin-0', 'TCP', 8080, false]] },
    ],
  },
  {
    name: 'PriorityField: lower priority value wins; Pass hands over to the BANP Allow',
    steps: [
      { apply: [priority50, priority60, allowSlytherinBanp] },
      { expect: [['slytherin-0', 'gryffindor-0', 'TCP', 80, false], ['slytherin-1', 'gryffindor-0', 'TCP', 8080, false], ['gryffindor-0', 'slytherin-0', 'TCP', 80, false], ['gryffindor-1', 'slytherin-0', 'TCP', 8080, false]] },
      { apply: [{ ...priority60, spec: { ...priority60.spec, priority: 40 } }] },
      { expect: [['slytherin-0', 'gryffindor-0', 'TCP', 80, true], ['slytherin-1', 'gryffindor-0', 'TCP', 8080, true], ['gryffindor-0', 'slytherin-0', 'TCP', 80, true], ['gryffindor-1', 'slytherin-0', 'TCP', 8080, true]] },
    ],
  },
  {
    name: 'Gress: ordered Allow/Deny/Pass rules across TCP, UDP and SCTP',
    steps: [
      { apply: [gressRules] },
      // allow-gress: ravenclaw both ways, any protocol
      { expect: [['gryffindor-0', 'ravenclaw-0', 'TCP', 80, true], ['gryffindor-1', 'ravenclaw-0', 'UDP', 53, true], ['gryffindor-0', 'ravenclaw-0', 'SCTP', 9003, true], ['ravenclaw-0', 'gryffindor-0', 'TCP', 80, true], ['ravenclaw-1', 'gryffindor-0', 'UDP', 53, true], ['ravenclaw-1', 'gryffindor-0', 'SCTP', 9003, true]] },
      // allow-gress at ports: hufflepuff only on the listed ports
      {
        expect: [
          ['gryffindor-0', 'hufflepuff-1', 'TCP', 8080, true], ['gryffindor-1', 'hufflepuff-1', 'TCP', 80, false],
          ['gryffindor-0', 'hufflepuff-1', 'UDP', 5353, true], ['gryffindor-1', 'hufflepuff-1', 'UDP', 53, false],
          ['gryffindor-0', 'hufflepuff-1', 'SCTP', 9003, true], ['gryffindor-1', 'hufflepuff-1', 'SCTP', 9005, false],
          ['hufflepuff-0', 'gryffindor-1', 'TCP', 80, true], ['hufflepuff-1', 'gryffindor-1', 'TCP', 8080, false],
          ['hufflepuff-0', 'gryffindor-1', 'UDP', 5353, true], ['hufflepuff-1', 'gryffindor-1', 'UDP', 53, false],
          ['hufflepuff-0', 'gryffindor-1', 'SCTP', 9003, true], ['hufflepuff-1', 'gryffindor-1', 'SCTP', 9005, false],
        ],
      },
      // deny-gress at ports: slytherin on 80/53/9003 only
      {
        expect: [
          ['gryffindor-0', 'slytherin-0', 'TCP', 80, false], ['gryffindor-1', 'slytherin-0', 'TCP', 8080, true],
          ['gryffindor-0', 'slytherin-0', 'UDP', 53, false], ['gryffindor-1', 'slytherin-0', 'UDP', 5353, true],
          ['gryffindor-0', 'slytherin-0', 'SCTP', 9003, false], ['gryffindor-1', 'slytherin-0', 'SCTP', 9005, true],
          ['slytherin-0', 'gryffindor-0', 'TCP', 80, false], ['slytherin-1', 'gryffindor-0', 'TCP', 8080, true],
          ['slytherin-0', 'gryffindor-0', 'UDP', 53, false], ['slytherin-1', 'gryffindor-0', 'UDP', 5353, true],
          ['slytherin-0', 'gryffindor-0', 'SCTP', 9003, false], ['slytherin-1', 'gryffindor-0', 'SCTP', 9005, true],
        ],
      },
      // the Deny rule moved above the Allow: ravenclaw is now denied
      { apply: [gressDenyFirst] },
      { expect: [['gryffindor-0', 'ravenclaw-1', 'TCP', 80, false], ['gryffindor-1', 'ravenclaw-1', 'UDP', 53, false], ['gryffindor-0', 'ravenclaw-1', 'SCTP', 9003, false], ['ravenclaw-0', 'gryffindor-1', 'TCP', 80, false], ['ravenclaw-1', 'gryffindor-1', 'UDP', 53, false], ['ravenclaw-1', 'gryffindor-1', 'SCTP', 9003, false]] },
      // the Pass rule moved to the top: no NetworkPolicy, no BANP, so allowed
      { apply: [gressPassFirst] },
      { expect: [['gryffindor-0', 'ravenclaw-0', 'TCP', 80, true], ['gryffindor-0', 'ravenclaw-0', 'UDP', 5353, true], ['gryffindor-0', 'ravenclaw-0', 'SCTP', 9003, true], ['ravenclaw-0', 'gryffindor-0', 'TCP', 80, true], ['ravenclaw-0', 'gryffindor-0', 'UDP', 5353, true], ['ravenclaw-0', 'gryffindor-0', 'SCTP', 9003, true]] },
    ],
  },
  {
    name: 'EgressInlineCIDRPeers: 0.0.0.0/0 covers Pods; a /32 Allow above it opens single Pods',
    steps: [
      { apply: [inlineCidr] },
      {
        expect: [
          ['gryffindor-1', 'ravenclaw-0', 'TCP', 80, false], ['gryffindor-1', 'ravenclaw-0', 'UDP', 53, false], ['gryffindor-1', 'ravenclaw-0', 'SCTP', 9003, false],
          ['gryffindor-1', 'hufflepuff-0', 'TCP', 80, false], ['gryffindor-1', 'hufflepuff-0', 'UDP', 53, false], ['gryffindor-1', 'hufflepuff-0', 'SCTP', 9003, false],
          ['gryffindor-1', 'slytherin-0', 'TCP', 80, true], ['gryffindor-1', 'slytherin-0', 'UDP', 53, true], ['gryffindor-1', 'slytherin-0', 'SCTP', 9003, true],
        ],
      },
      { apply: [inlineCidrWithPodIps] },
      {
        expect: [
          ['gryffindor-1', 'ravenclaw-0', 'TCP', 80, true], ['gryffindor-1', 'ravenclaw-0', 'UDP', 53, true], ['gryffindor-1', 'ravenclaw-0', 'SCTP', 9003, true],
          ['gryffindor-1', 'hufflepuff-0', 'TCP', 80, true], ['gryffindor-1', 'hufflepuff-0', 'UDP', 53, true], ['gryffindor-1', 'hufflepuff-0', 'SCTP', 9003, true],
          ['gryffindor-1', 'ravenclaw-1', 'TCP', 80, false], ['gryffindor-1', 'ravenclaw-1', 'UDP', 53, false], ['gryffindor-1', 'ravenclaw-1', 'SCTP', 9003, false],
          ['gryffindor-1', 'hufflepuff-1', 'TCP', 80, false], ['gryffindor-1', 'hufflepuff-1', 'UDP', 53, false], ['gryffindor-1', 'hufflepuff-1', 'SCTP', 9003, false],
        ],
      },
    ],
  },
  {
    name: 'EgressNodePeers: Allow, Pass and Deny to Node addresses',
    steps: [
      { apply: [nodePeers] },
      {
        expect: [
          ['gryffindor-0', 'centaur', 'TCP', 36363, true],
          ['gryffindor-0', 'centaur', 'UDP', 34345, true], // Pass, and nothing else decides
          ['gryffindor-0', 'centaur', 'TCP', 36364, false],
          ['gryffindor-1', 'centaur', 'UDP', 34346, false],
          ['gryffindor-1', 'centaur', 'SCTP', 9003, false],
          ['gryffindor-0', 'slytherin-0', 'TCP', 80, false],
        ],
      },
    ],
  },
  {
    name: 'EgressNamedPort: the named port "web" allows 80 and not 8080',
    steps: [
      { apply: [egressTcp] },
      { expect: [['gryffindor-0', 'hufflepuff-1', 'TCP', 8080, true], ['gryffindor-0', 'hufflepuff-1', 'TCP', 80, false]] },
      { apply: [egressNamedPort] },
      { expect: [['gryffindor-0', 'hufflepuff-1', 'TCP', 80, true], ['gryffindor-0', 'hufflepuff-1', 'TCP', 8080, false], ['gryffindor-1', 'hufflepuff-0', 'UDP', 53, false]] },
    ],
  },
  {
    name: 'BaselineAdminNetworkPolicyGress: ordered Allow/Deny baseline rules',
    steps: [
      { apply: [banpGress] },
      { expect: [['gryffindor-0', 'ravenclaw-0', 'TCP', 80, true], ['gryffindor-0', 'ravenclaw-0', 'UDP', 53, true], ['gryffindor-0', 'ravenclaw-0', 'SCTP', 9003, true], ['ravenclaw-0', 'gryffindor-0', 'TCP', 80, true], ['ravenclaw-1', 'gryffindor-0', 'UDP', 53, true], ['ravenclaw-1', 'gryffindor-0', 'SCTP', 9003, true]] },
      {
        expect: [
          ['gryffindor-0', 'hufflepuff-1', 'TCP', 8080, true], ['gryffindor-0', 'hufflepuff-1', 'TCP', 80, false],
          ['gryffindor-0', 'hufflepuff-1', 'UDP', 5353, true], ['gryffindor-0', 'hufflepuff-1', 'UDP', 53, false],
          ['gryffindor-0', 'hufflepuff-1', 'SCTP', 9003, true], ['gryffindor-0', 'hufflepuff-1', 'SCTP', 9005, false],
          ['hufflepuff-0', 'gryffindor-1', 'TCP', 80, true], ['hufflepuff-0', 'gryffindor-1', 'TCP', 8080, false],
          ['hufflepuff-0', 'gryffindor-1', 'UDP', 5353, true], ['hufflepuff-0', 'gryffindor-1', 'UDP', 53, false],
          ['hufflepuff-0', 'gryffindor-1', 'SCTP', 9003, true], ['hufflepuff-0', 'gryffindor-1', 'SCTP', 9005, false],
        ],
      },
      {
        expect: [
          ['gryffindor-0', 'slytherin-0', 'TCP', 80, false], ['gryffindor-0', 'slytherin-0', 'TCP', 8080, true],
          ['gryffindor-0', 'slytherin-0', 'UDP', 53, false], ['gryffindor-0', 'slytherin-0', 'UDP', 5353, true],
          ['gryffindor-0', 'slytherin-0', 'SCTP', 9003, false], ['gryffindor-0', 'slytherin-0', 'SCTP', 9005, true],
          ['slytherin-0', 'gryffindor-0', 'TCP', 80, false], ['slytherin-0', 'gryffindor-0', 'TCP', 8080, true],
          ['slytherin-0', 'gryffindor-0', 'UDP', 53, false], ['slytherin-0', 'gryffindor-0', 'UDP', 5353, true],
          ['slytherin-0', 'gryffindor-0', 'SCTP', 9003, false], ['slytherin-0', 'gryffindor-0', 'SCTP', 9005, true],
        ],
      },
      { apply: [banpGressDenyFirst] },
      { expect: [['gryffindor-0', 'ravenclaw-1', 'TCP', 80, false], ['gryffindor-0', 'ravenclaw-1', 'UDP', 53, false], ['gryffindor-0', 'ravenclaw-1', 'SCTP', 9003, false], ['ravenclaw-1', 'gryffindor-1', 'TCP', 80, false], ['ravenclaw-1', 'gryffindor-1', 'UDP', 53, false], ['ravenclaw-1', 'gryffindor-1', 'SCTP', 9003, false]] },
      { apply: [gryffindorAllowAll] },
      { expect: [['gryffindor-0', 'ravenclaw-1', 'TCP', 80, true], ['ravenclaw-1', 'gryffindor-1', 'UDP', 53, true], ['gryffindor-0', 'hufflepuff-1', 'TCP', 80, true], ['slytherin-0', 'gryffindor-0', 'SCTP', 9003, true]] },
    ],
  },
];

for (const c of cases) {
  for (const version of ['v1alpha1', 'v1alpha2'] as const) {
    t.test(`${c.name} (${version})`, async (t) => {
      const convert = (o: KubeObject) => (version === 'v1alpha2' ? toClusterNetworkPolicy(o) : o);
      const engine = engineWith(housesModel());
      let expects = 0;
      for (const [i, step] of c.steps.entries()) {
        if ('apply' in step) {
          for (const o of step.apply) engine.upsert(convert(o));
          t.same(engine.errors(), [], `step ${i}: objects valid`);
        } else if ('remove' in step) {
          const o = convert(step.remove);
          engine.remove({ apiVersion: o.apiVersion, kind: o.kind, ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}), name: o.metadata.name });
        } else {
          expects++;
          for (const [from, to, protocol, port, reachable] of step.expect) {
            const r = engine.evaluate({ from: ep(from), to: ep(to), port, protocol });
            t.equal(r.verdict, reachable ? 'allow' : 'drop', `step ${i}: ${from} → ${to} ${protocol}/${port}`);
          }
        }
      }
      t.ok(expects > 0);
    });
  }
}
