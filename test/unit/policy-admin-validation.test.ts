// Validation of ANP / BANP (v1alpha1) and CNP (v1alpha2): what the upstream CRDs' OpenAPI
// schema and CEL rules reject. Each invalid object yields no rules and errors naming the
// object and the field.
import t from 'tap';
import { normalizers } from '../../daemon/policy/admin/index.js';
import type { KubeObject, NormalizeContext, NormalizeResult } from '../../daemon/policy/types.js';

const ctx: NormalizeContext = { tierPriority: () => undefined, namespaceAnnotations: () => undefined };

function normalize(obj: KubeObject): NormalizeResult {
  const [group, version] = obj.apiVersion.split('/');
  const entry = normalizers.find((n) => n.group === group && n.versions.includes(version!) && n.kind === obj.kind)!;
  return entry.normalize(obj, ctx);
}

const A1 = 'policy.networking.k8s.io/v1alpha1';
const A2 = 'policy.networking.k8s.io/v1alpha2';

const okIngress = { name: 'ok', action: 'Allow', from: [{ namespaces: {} }] };
const okCnpIngress = { name: 'ok', action: 'Accept', from: [{ namespaces: {} }] };

/** A valid ANP with `patch` merged into its spec. */
function anp(patch: Record<string, unknown>, name = 'bad-anp'): KubeObject {
  return { apiVersion: A1, kind: 'AdminNetworkPolicy', metadata: { name }, spec: { priority: 10, subject: { namespaces: {} }, ingress: [okIngress], ...patch } };
}
function banp(patch: Record<string, unknown>, name = 'default'): KubeObject {
  return { apiVersion: A1, kind: 'BaselineAdminNetworkPolicy', metadata: { name }, spec: { subject: { namespaces: {} }, ingress: [okIngress], ...patch } };
}
function cnp(patch: Record<string, unknown>, name = 'bad-cnp'): KubeObject {
  return { apiVersion: A2, kind: 'ClusterNetworkPolicy', metadata: { name }, spec: { tier: 'Admin', priority: 10, subject: { namespaces: {} }, ingress: [okCnpIngress], ...patch } };
}
const egress = (rule: Record<string, unknown>) => ({ egress: [{ name: 'e', action: 'Deny', to: [{ namespaces: {} }], ...rule }] });
const ingressPorts = (ports: unknown) => ({ ingress: [{ ...okIngress, ports }] });
const protocols = (protocols: unknown, action = 'Accept') => ({ ingress: [{ ...okCnpIngress, action, protocols }] });
const many = (n: number, item: unknown) => Array.from({ length: n }, () => item);

/** [description, object, expected error field, message pattern] */
const cases: [string, KubeObject, string, RegExp][] = [
  // object level
  ['spec missing', { apiVersion: A1, kind: 'AdminNetworkPolicy', metadata: { name: 'bad-anp' } }, 'spec', /required/],
  ['metadata.name missing', { ...anp({}), metadata: {} as any }, 'metadata.name', /required/],
  ['name not a DNS subdomain', anp({}, 'Bad_Name'), 'metadata.name', /not a valid name/],
  ['ANP priority missing', anp({ priority: undefined }), 'spec.priority', /required/],
  ['ANP priority below 0', anp({ priority: -1 }), 'spec.priority', /between 0 and 1000/],
  ['ANP priority above 1000', anp({ priority: 1001 }), 'spec.priority', /between 0 and 1000/],
  ['ANP priority not an integer', anp({ priority: 1.5 }), 'spec.priority', /integer/],
  ['ANP priority as a string', anp({ priority: '5' }), 'spec.priority', /integer/],
  ['BANP named other than default', banp({}, 'other'), 'metadata.name', /must be "default"/],
  // subject
  ['subject missing', anp({ subject: undefined }), 'spec.subject', /required/],
  ['subject with both namespaces and pods', anp({ subject: { namespaces: {}, pods: { namespaceSelector: {}, podSelector: {} } } }), 'spec.subject', /exactly one of namespaces, pods, got namespaces and pods/],
  ['subject empty', anp({ subject: {} }), 'spec.subject', /exactly one of namespaces, pods/],
  ['subject with only an unknown field', anp({ subject: { nodes: {} } }), 'spec.subject', /nodes is not a field here/],
  ['v1alpha1 subject pods without namespaceSelector', anp({ subject: { pods: { podSelector: {} } } }), 'spec.subject.pods.namespaceSelector', /required/],
  ['subject pods without podSelector', anp({ subject: { pods: { namespaceSelector: {} } } }), 'spec.subject.pods.podSelector', /required/],
  ['CNP subject pods without podSelector', cnp({ subject: { pods: { namespaceSelector: {} } } }), 'spec.subject.pods.podSelector', /required/],
  ['invalid selector operator', anp({ subject: { namespaces: { matchExpressions: [{ key: 'a', operator: 'Maybe' }] } } }), 'spec.subject.namespaces.matchExpressions[0].operator', /Unsupported value: "Maybe": supported values: "In", "NotIn"/],
  ['In selector without values', anp({ subject: { namespaces: { matchExpressions: [{ key: 'a', operator: 'In' }] } } }), 'spec.subject.namespaces.matchExpressions[0].values', /must be specified when `operator` is 'In' or 'NotIn'/],
  ['selector with an invalid label value', anp({ ingress: [{ action: 'Allow', from: [{ namespaces: { matchLabels: { ns: 'not valid!' } } }] }] }), 'spec.ingress[0].from[0].namespaces.matchLabels', /label value/],
  ['selector that is not an object', anp({ subject: { namespaces: 'x' } }), 'spec.subject.namespaces', /label selector/],
  // rule lists
  ['ANP 101 ingress rules', anp({ ingress: many(101, okIngress) }), 'spec.ingress', /at most 100 items, got 101/],
  ['ANP 101 egress rules', anp({ egress: many(101, { action: 'Allow', to: [{ namespaces: {} }] }) }), 'spec.egress', /at most 100/],
  ['BANP 101 ingress rules', banp({ ingress: many(101, okIngress) }), 'spec.ingress', /at most 100/],
  ['CNP 26 ingress rules', cnp({ ingress: many(26, okCnpIngress) }), 'spec.ingress', /at most 25 items, got 26/],
  ['ingress not a list', anp({ ingress: { name: 'x' } }), 'spec.ingress', /must be a list/],
  ['rule not an object', anp({ ingress: ['allow'] }), 'spec.ingress[0]', /must be an object/],
  // rule name
  ['rule name longer than 100', anp({ ingress: [{ ...okIngress, name: 'n'.repeat(101) }] }), 'spec.ingress[0].name', /at most 100 characters, got 101/],
  ['rule name not a string', anp({ ingress: [{ ...okIngress, name: 5 }] }), 'spec.ingress[0].name', /string/],
  // actions
  ['action missing', anp({ ingress: [{ from: [{ namespaces: {} }] }] }), 'spec.ingress[0].action', /required \(one of Allow, Deny, Pass\)/],
  ['ANP action lower-case', anp({ ingress: [{ ...okIngress, action: 'allow' }] }), 'spec.ingress[0].action', /"allow" is not a AdminNetworkPolicy action/],
  ['ANP action Accept (a v1alpha2 name)', anp({ ingress: [{ ...okIngress, action: 'Accept' }] }), 'spec.ingress[0].action', /"Accept" is not a AdminNetworkPolicy action; use one of Allow, Deny, Pass/],
  ['BANP action Pass', banp({ ingress: [{ ...okIngress, action: 'Pass' }] }), 'spec.ingress[0].action', /"Pass" is not a BaselineAdminNetworkPolicy action; use one of Allow, Deny$/],
  ['CNP action Allow (a v1alpha1 name)', cnp({ ingress: [{ ...okCnpIngress, action: 'Allow' }] }), 'spec.ingress[0].action', /use one of Accept, Deny, Pass/],
  ['Antrea action Drop', anp({ ingress: [{ ...okIngress, action: 'Drop' }] }), 'spec.ingress[0].action', /"Drop" is not/],
  // peers
  ['from missing', anp({ ingress: [{ action: 'Allow' }] }), 'spec.ingress[0].from', /required/],
  ['from empty', anp({ ingress: [{ action: 'Allow', from: [] }] }), 'spec.ingress[0].from', /at least 1 item/],
  ['to empty', anp(egress({ to: [] })), 'spec.egress[0].to', /at least 1 item/],
  ['ANP 101 peers', anp({ ingress: [{ action: 'Allow', from: many(101, { namespaces: {} }) }] }), 'spec.ingress[0].from', /at most 100/],
  ['CNP 26 peers', cnp({ ingress: [{ action: 'Accept', from: many(26, { namespaces: {} }) }] }), 'spec.ingress[0].from', /at most 25/],
  ['peer with two fields', anp({ ingress: [{ action: 'Allow', from: [{ namespaces: {}, pods: { namespaceSelector: {}, podSelector: {} } }] }] }), 'spec.ingress[0].from[0]', /exactly one of namespaces, pods, got namespaces and pods/],
  ['empty peer', anp({ ingress: [{ action: 'Allow', from: [{}] }] }), 'spec.ingress[0].from[0]', /exactly one of namespaces, pods/],
  ['nodes is not an ingress peer', anp({ ingress: [{ action: 'Allow', from: [{ nodes: {} }] }] }), 'spec.ingress[0].from[0]', /nodes is not a field here/],
  ['networks is not an ingress peer', cnp({ ingress: [{ action: 'Deny', from: [{ networks: ['10.0.0.0/8'] }] }] }), 'spec.ingress[0].from[0]', /networks is not a field here/],
  ['domainNames is not a BANP peer', banp(egress({ action: 'Allow', to: [{ domainNames: ['a.com'] }] })), 'spec.egress[0].to[0]', /domainNames is not a field here/],
  ['egress peer with nodes and networks', anp(egress({ to: [{ nodes: {}, networks: ['10.0.0.0/8'] }] })), 'spec.egress[0].to[0]', /got nodes and networks/],
  ['peer pods without podSelector', anp({ ingress: [{ action: 'Allow', from: [{ pods: { namespaceSelector: {} } }] }] }), 'spec.ingress[0].from[0].pods.podSelector', /required/],
  ['peer pods without namespaceSelector (v1alpha1)', anp({ ingress: [{ action: 'Allow', from: [{ pods: { podSelector: {} } }] }] }), 'spec.ingress[0].from[0].pods.namespaceSelector', /required/],
  // networks
  ['networks empty', anp(egress({ to: [{ networks: [] }] })), 'spec.egress[0].to[0].networks', /at least 1 item/],
  ['networks with 26 CIDRs', anp(egress({ to: [{ networks: Array.from({ length: 26 }, (_, i) => `10.${i}.0.0/16`) }] })), 'spec.egress[0].to[0].networks', /at most 25/],
  ['network without a prefix length', anp(egress({ to: [{ networks: ['10.0.0.1'] }] })), 'spec.egress[0].to[0].networks[0]', /not in CIDR notation/],
  ['network with a bad address', anp(egress({ to: [{ networks: ['10.0.0.256/32'] }] })), 'spec.egress[0].to[0].networks[0]', /not a valid IPv4 or IPv6 CIDR/],
  ['IPv4 prefix above 32', anp(egress({ to: [{ networks: ['10.0.0.0/33'] }] })), 'spec.egress[0].to[0].networks[0]', /prefix length must be a number from 0 to 32/],
  ['IPv6 prefix above 128', cnp(egress({ to: [{ networks: ['fd00::/129'] }] })), 'spec.egress[0].to[0].networks[0]', /prefix length must be a number from 0 to 128/],
  ['prefix length not a number', anp(egress({ to: [{ networks: ['10.0.0.0/x'] }] })), 'spec.egress[0].to[0].networks[0]', /prefix length must be a number/],
  ['bad IPv6', cnp(egress({ to: [{ networks: ['fd00:::1/64'] }] })), 'spec.egress[0].to[0].networks[0]', /not a valid/],
  ['duplicate network (list-type set)', anp(egress({ to: [{ networks: ['10.0.0.0/8', '10.0.0.0/8'] }] })), 'spec.egress[0].to[0].networks[1]', /duplicate/],
  ['network longer than 43 characters', anp(egress({ to: [{ networks: ['1'.repeat(44)] }] })), 'spec.egress[0].to[0].networks[0]', /43 characters/],
  // domain names
  ['domain name with a partial wildcard', anp(egress({ action: 'Allow', to: [{ domainNames: ['foo*.example.com'] }] })), 'spec.egress[0].to[0].domainNames[0]', /not a domain name/],
  ['domain name with a single label', anp(egress({ action: 'Allow', to: [{ domainNames: ['localhost'] }] })), 'spec.egress[0].to[0].domainNames[0]', /not a domain name/],
  ['domainNames in a Deny rule', anp(egress({ action: 'Deny', to: [{ domainNames: ['example.com'] }] })), 'spec.egress[0].action', /only supported in Allow rules, not Deny/],
  ['domainNames in a CNP Pass rule', cnp(egress({ action: 'Pass', to: [{ domainNames: ['example.com'] }] })), 'spec.egress[0].action', /only supported in Accept rules, not Pass/],
  // v1alpha1 ports
  ['ports empty', anp(ingressPorts([])), 'spec.ingress[0].ports', /at least 1 item/],
  ['ports 101 items', anp(ingressPorts(many(101, { portNumber: { port: 80 } }))), 'spec.ingress[0].ports', /at most 100/],
  ['port item with two forms', anp(ingressPorts([{ portNumber: { port: 80 }, namedPort: 'web' }])), 'spec.ingress[0].ports[0]', /exactly one of portNumber, namedPort, portRange, got portNumber and namedPort/],
  ['port item with no form', anp(ingressPorts([{}])), 'spec.ingress[0].ports[0]', /exactly one of portNumber, namedPort, portRange/],
  ['portNumber 0', anp(ingressPorts([{ portNumber: { port: 0 } }])), 'spec.ingress[0].ports[0].portNumber.port', /between 1 and 65535/],
  ['portNumber 65536', anp(ingressPorts([{ portNumber: { port: 65536 } }])), 'spec.ingress[0].ports[0].portNumber.port', /between 1 and 65535/],
  ['portNumber without port', anp(ingressPorts([{ portNumber: { protocol: 'TCP' } }])), 'spec.ingress[0].ports[0].portNumber.port', /required/],
  ['protocol ICMP', anp(ingressPorts([{ portNumber: { protocol: 'ICMP', port: 1 } }])), 'spec.ingress[0].ports[0].portNumber.protocol', /not a supported protocol/],
  ['protocol lower-case', anp(ingressPorts([{ portRange: { protocol: 'udp', start: 1, end: 2 } }])), 'spec.ingress[0].ports[0].portRange.protocol', /"udp" is not a supported protocol/],
  ['portRange start = end', anp(ingressPorts([{ portRange: { start: 80, end: 80 } }])), 'spec.ingress[0].ports[0].portRange', /start \(80\) must be less than end \(80\)/],
  ['portRange start > end', banp(ingressPorts([{ portRange: { start: 81, end: 80 } }])), 'spec.ingress[0].ports[0].portRange', /less than end/],
  ['portRange without end', anp(ingressPorts([{ portRange: { start: 80 } }])), 'spec.ingress[0].ports[0].portRange.end', /required/],
  ['empty namedPort', anp(ingressPorts([{ namedPort: '' }])), 'spec.ingress[0].ports[0].namedPort', /non-empty/],
  ['namedPort with a networks peer', anp(egress({ to: [{ networks: ['10.0.0.0/8'] }], ports: [{ namedPort: 'web' }] })), 'spec.egress[0]', /named ports cannot be combined with networks\/nodes\/domainNames/],
  ['namedPort with a nodes peer (BANP)', banp(egress({ to: [{ namespaces: {} }, { nodes: {} }], ports: [{ namedPort: 'web' }] })), 'spec.egress[0]', /named ports cannot be combined with networks\/nodes peers/],
  // v1alpha2
  ['CNP tier missing', cnp({ tier: undefined }), 'spec.tier', /required \(Admin or Baseline\)/],
  ['CNP tier lower-case', cnp({ tier: 'admin' }), 'spec.tier', /"admin" is not a tier/],
  ['CNP tier of Antrea', cnp({ tier: 'Application' }), 'spec.tier', /not a tier/],
  ['CNP priority missing', cnp({ priority: undefined }), 'spec.priority', /required/],
  ['CNP priority above 1000', cnp({ tier: 'Baseline', priority: 5000 }), 'spec.priority', /between 0 and 1000/],
  ['CNP protocols empty', cnp(protocols([])), 'spec.ingress[0].protocols', /at least 1 item/],
  ['CNP 26 protocols', cnp(protocols(many(26, { tcp: { destinationPort: { number: 80 } } }))), 'spec.ingress[0].protocols', /at most 25/],
  ['CNP protocol item with tcp and udp', cnp(protocols([{ tcp: { destinationPort: { number: 80 } }, udp: { destinationPort: { number: 80 } } }])), 'spec.ingress[0].protocols[0]', /exactly one of tcp, udp, sctp, destinationNamedPort, got tcp and udp/],
  ['CNP protocol item empty', cnp(protocols([{}])), 'spec.ingress[0].protocols[0]', /exactly one of tcp, udp, sctp, destinationNamedPort/],
  ['CNP protocol icmp (not a field)', cnp(protocols([{ icmp: {} }])), 'spec.ingress[0].protocols[0]', /icmp is not a field here/],
  ['CNP tcp without destinationPort', cnp(protocols([{ tcp: {} }])), 'spec.ingress[0].protocols[0].tcp', /must set destinationPort/],
  ['CNP destinationPort with number and range', cnp(protocols([{ udp: { destinationPort: { number: 80, range: { start: 1, end: 2 } } } }])), 'spec.ingress[0].protocols[0].udp.destinationPort', /exactly one of number, range, got number and range/],
  ['CNP destinationPort empty', cnp(protocols([{ sctp: { destinationPort: {} } }])), 'spec.ingress[0].protocols[0].sctp.destinationPort', /exactly one of number, range/],
  ['CNP port number 0', cnp(protocols([{ tcp: { destinationPort: { number: 0 } } }])), 'spec.ingress[0].protocols[0].tcp.destinationPort.number', /between 1 and 65535/],
  ['CNP range start = end', cnp(protocols([{ tcp: { destinationPort: { range: { start: 90, end: 90 } } } }])), 'spec.ingress[0].protocols[0].tcp.destinationPort.range', /start port \(90\) must be less than end port \(90\)/],
  ['CNP range end above 65535', cnp(protocols([{ tcp: { destinationPort: { range: { start: 90, end: 70000 } } } }])), 'spec.ingress[0].protocols[0].tcp.destinationPort.range.end', /between 1 and 65535/],
  ['CNP range without start', cnp(protocols([{ tcp: { destinationPort: { range: { end: 90 } } } }])), 'spec.ingress[0].protocols[0].tcp.destinationPort.range.start', /required/],
  ['CNP empty destinationNamedPort', cnp(protocols([{ destinationNamedPort: '' }])), 'spec.ingress[0].protocols[0].destinationNamedPort', /non-empty/],
  ['CNP named port with a domainNames peer', cnp(egress({ action: 'Accept', to: [{ domainNames: ['example.com'] }], protocols: [{ destinationNamedPort: 'web' }] })), 'spec.egress[0]', /named ports cannot be combined with networks\/nodes\/domainNames/],
  ['CNP ports (the v1alpha1 field) is ignored, Accept valid; Allow is not', cnp({ ingress: [{ action: 'Allow', from: [{ namespaces: {} }], ports: [{ portNumber: { port: 80 } }] }] }), 'spec.ingress[0].action', /not a ClusterNetworkPolicy action/],
];

for (const [what, obj, field, message] of cases) {
  t.test(`invalid: ${what}`, async (t) => {
    const r = normalize(obj);
    t.same(r.rules, [], 'an invalid object yields no rules');
    t.same(r.isolations, []);
    const hit = r.errors.find((e) => e.field === field);
    t.ok(hit, `an error names ${field}`);
    if (!hit) t.comment(`errors: ${JSON.stringify(r.errors)}`);
    if (hit) {
      t.match(hit.message, message);
      t.equal(hit.kind, obj.kind, 'the error names the kind');
      t.equal(hit.name, obj.metadata.name ?? '<unnamed>', 'the error names the object');
    }
  });
}

t.test('the baseline objects of the table are valid (so each case fails for its own reason)', async (t) => {
  for (const obj of [anp({}), banp({}), cnp({}), cnp({ tier: 'Baseline' }), anp(egress({})), banp(egress({})), cnp(egress({}))]) {
    const r = normalize(obj);
    t.same(r.errors, [], `${obj.kind} ${JSON.stringify(obj.spec)}`);
    t.ok(r.rules.length > 0);
  }
});

t.test('valid boundary values are accepted', async (t) => {
  const ok = [
    anp({ priority: 0 }),
    anp({ priority: 1000 }),
    anp({ ingress: many(100, okIngress) }),
    anp({ ingress: [{ ...okIngress, name: 'n'.repeat(100) }] }),
    anp(ingressPorts([{ portRange: { start: 1, end: 65535 } }, { portNumber: { port: 65535 } }])),
    anp(egress({ to: [{ networks: Array.from({ length: 25 }, (_, i) => `10.${i}.0.0/16`) }] })),
    anp(egress({ to: [{ networks: ['10.0.0.0/8', '::/0', '::ffff:10.0.0.1/128', '2001:db8::1/64'] }] })),
    anp(egress({ action: 'Allow', to: [{ domainNames: ['*.example.com', 'a_b.example.com.'] }] })),
    anp(egress({ to: [{ networks: ['10.0.0.0/8'] }], ports: [{ portNumber: { port: 80 } }] })),
    cnp({ ingress: many(25, okCnpIngress) }),
    cnp({ subject: { pods: { podSelector: {} } } }),
    cnp(protocols([{ tcp: { destinationPort: { range: { start: 1, end: 2 } } } }])),
    cnp({ tier: 'Baseline', ingress: [{ ...okCnpIngress, action: 'Pass' }] }),
    banp({ egress: [{ action: 'Deny', to: [{ nodes: {} }] }] }),
  ];
  for (const obj of ok) {
    const r = normalize(obj);
    t.same(r.errors, [], `${obj.kind} ${JSON.stringify(obj.spec).slice(0, 120)}`);
  }
});

t.test('one bad rule invalidates the whole object; every problem is reported', async (t) => {
  const obj = anp({
    priority: 2000,
    ingress: [okIngress, { name: 'bad', action: 'Reject', from: [] }],
    egress: [{ action: 'Allow', to: [{ networks: ['nope'] }], ports: [{ portRange: { start: 9, end: 3 } }] }],
  });
  const r = normalize(obj);
  t.same(r.rules, []);
  t.same(
    r.errors.map((e) => e.field).sort(),
    ['spec.egress[0].ports[0].portRange', 'spec.egress[0].to[0].networks[0]', 'spec.ingress[1].action', 'spec.ingress[1].from', 'spec.priority'],
  );
  for (const e of r.errors) t.match(e, { kind: 'AdminNetworkPolicy', name: 'bad-anp' });
});

t.test('an object without a name is still explained', async (t) => {
  const r = normalize({ apiVersion: A2, kind: 'ClusterNetworkPolicy', metadata: {} as any, spec: 'nope' });
  t.same(r.rules, []);
  t.same(
    r.errors.map((e) => [e.name, e.field]),
    [
      ['<unnamed>', 'metadata.name'],
      ['<unnamed>', 'spec'],
    ],
  );
});

t.test('malformed input of any shape gives errors, never an exception or a partial result', async (t) => {
  const junk = [null, 0, -1, 1.5, 'x', '', true, [], [null], {}, { a: 1 }, [{}], 70000];
  const rich: KubeObject[] = [
    anp({ egress: [{ name: 'e', action: 'Deny', to: [{ networks: ['10.0.0.0/8'] }, { nodes: {} }, { pods: { namespaceSelector: {}, podSelector: {} } }], ports: [{ portRange: { start: 1, end: 2 } }, { portNumber: { port: 3 } }] }] }),
    banp({ egress: [{ action: 'Allow', to: [{ namespaces: { matchExpressions: [{ key: 'k', operator: 'In', values: ['v'] }] } }], ports: [{ namedPort: 'web' }] }] }),
    cnp({ egress: [{ action: 'Accept', to: [{ domainNames: ['a.example.com'] }], protocols: [{ tcp: { destinationPort: { range: { start: 1, end: 2 } } } }, { udp: { destinationPort: { number: 53 } } }] }] }),
  ];
  /** Every path to a value inside `v`. */
  const paths = (v: unknown, prefix: (string | number)[] = []): (string | number)[][] => {
    if (v === null || typeof v !== 'object') return [prefix];
    const keys: (string | number)[] = Array.isArray(v) ? v.map((_, i) => i) : Object.keys(v);
    return [prefix, ...keys.flatMap((k) => paths((v as any)[k], [...prefix, k]))];
  };
  let cases = 0;
  for (const base of rich) {
    const all = paths(base.spec).filter((p) => p.length > 0);
    for (const path of all) {
      for (const value of junk) {
        const obj = JSON.parse(JSON.stringify(base));
        let parent = obj.spec;
        for (const key of path.slice(0, -1)) parent = parent[key];
        parent[path[path.length - 1]!] = value;
        cases++;
        let r: NormalizeResult | undefined;
        try {
          r = normalize(obj);
        } catch (err) {
          t.fail(`threw on ${path.join('.')}: ${(err as Error).message}`);
          continue;
        }
        if (r.errors.length > 0 && r.rules.length > 0) t.fail(`rules and errors together at ${path.join('.')}`);
        for (const e of r.errors) if (!e.field || !e.message) t.fail(`error without field/message at ${path.join('.')}`);
      }
    }
  }
  t.ok(cases > 1000, `${cases} malformed variants checked (every value position × every junk value)`);
});
