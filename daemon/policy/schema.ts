/**
 * The field schema of every policy kind sluice reads: the one source for the unknown-field
 * warnings (what `kubectl apply` refuses with strict field validation and the API server warns
 * about: a typo such as spec.podSelecter or an ANP rule's prots silently changes a policy's
 * meaning) and for the openAPIV3Schema of the CRDs in install/crds.yaml. Pure.
 *
 * Fields follow the upstream Go types: networking.k8s.io/v1 NetworkPolicy, crd.antrea.io
 * v1beta1 (and the identical v1alpha1) Tier, ClusterNetworkPolicy, NetworkPolicy, ClusterGroup,
 * Group, policy.networking.k8s.io v1alpha1 AdminNetworkPolicy/BaselineAdminNetworkPolicy and
 * v1alpha2 ClusterNetworkPolicy, fields in Go struct order. metadata and status are not checked
 * (the API server owns them).
 */

export type FieldSchema =
  /** `always`: the Go field has no omitempty (it is serialized even when empty or absent). */
  | { type: 'string' | 'integer' | 'number' | 'boolean' | 'int-or-string'; always?: boolean }
  | { type: 'array'; items: FieldSchema }
  /** A map with free keys (matchLabels). */
  | { type: 'map'; values: FieldSchema }
  | { type: 'object'; fields: Readonly<Record<string, FieldSchema>> }
  /** Anything (metadata, status): neither checked nor pruned. */
  | { type: 'any' };

const string: FieldSchema = { type: 'string' };
const integer: FieldSchema = { type: 'integer' };
const number: FieldSchema = { type: 'number' };
const intOrString: FieldSchema = { type: 'int-or-string' };
const any: FieldSchema = { type: 'any' };
const list = (items: FieldSchema): FieldSchema => ({ type: 'array', items });
const requiredString: FieldSchema = { type: 'string', always: true };
const obj = (fields: Record<string, FieldSchema>): FieldSchema => ({ type: 'object', fields });

const labelSelector = obj({
  matchLabels: { type: 'map', values: string },
  matchExpressions: list(obj({ key: requiredString, operator: requiredString, values: list(string) })),
});
const namespacedName = obj({ name: string, namespace: string });

// networking.k8s.io/v1
const k8sIpBlock = obj({ cidr: string, except: list(string) });
const k8sPeer = obj({ podSelector: labelSelector, namespaceSelector: labelSelector, ipBlock: k8sIpBlock });
const k8sPort = obj({ protocol: string, port: intOrString, endPort: integer });
const k8sNetworkPolicySpec = obj({
  podSelector: labelSelector,
  policyTypes: list(string),
  ingress: list(obj({ from: list(k8sPeer), ports: list(k8sPort) })),
  egress: list(obj({ to: list(k8sPeer), ports: list(k8sPort) })),
});

// crd.antrea.io
const antreaIpBlock = obj({ cidr: requiredString, except: list(string) });
const antreaPeer = obj({
  ipBlock: antreaIpBlock,
  podSelector: labelSelector,
  namespaceSelector: labelSelector,
  namespaces: obj({ match: string, sameLabels: list(string) }),
  externalEntitySelector: labelSelector,
  group: string,
  fqdn: string,
  serviceAccount: namespacedName,
  nodeSelector: labelSelector,
  scope: string,
});
const antreaAppliedTo = obj({
  podSelector: labelSelector,
  namespaceSelector: labelSelector,
  externalEntitySelector: labelSelector,
  group: string,
  serviceAccount: namespacedName,
  service: namespacedName,
  nodeSelector: labelSelector,
});
/** The v1beta1 Rule, fields in Go struct order (antrea/rulename.ts serializes rules from it as Go does). */
export const ANTREA_RULE = obj({
  action: requiredString,
  ports: list(obj({ protocol: string, port: intOrString, endPort: integer, sourcePort: integer, sourceEndPort: integer })),
  protocols: list(obj({ icmp: obj({ icmpType: integer, icmpCode: integer }), igmp: obj({ igmpType: integer, groupAddress: string }) })),
  l7Protocols: list(obj({ http: obj({ host: string, method: string, path: string }), tls: obj({ sni: string }) })),
  from: list(antreaPeer),
  to: list(antreaPeer),
  toServices: list(obj({ name: string, namespace: string, scope: string })),
  name: string,
  enableLogging: { type: 'boolean', always: true },
  logLabel: string,
  appliedTo: list(antreaAppliedTo),
});
const antreaPolicySpec = obj({ tier: string, priority: number, appliedTo: list(antreaAppliedTo), ingress: list(ANTREA_RULE), egress: list(ANTREA_RULE) });
const antreaGroupFields = {
  podSelector: labelSelector,
  namespaceSelector: labelSelector,
  externalEntitySelector: labelSelector,
  ipBlock: antreaIpBlock,
  ipBlocks: list(antreaIpBlock),
  serviceReference: namespacedName,
  childGroups: list(string),
};

// policy.networking.k8s.io
const adminPods = obj({ namespaceSelector: labelSelector, podSelector: labelSelector });
const adminSubject = obj({ namespaces: labelSelector, pods: adminPods });
const adminPorts = list(obj({
  portNumber: obj({ protocol: string, port: integer }),
  namedPort: string,
  portRange: obj({ protocol: string, start: integer, end: integer }),
}));
function adminSpec(opts: { priority: boolean; egressPeerFields: Record<string, FieldSchema>; portsField: string; ports: FieldSchema; tier?: boolean }): FieldSchema {
  const ingress = obj({ name: string, action: string, from: list(obj({ namespaces: labelSelector, pods: adminPods })), [opts.portsField]: opts.ports });
  const egress = obj({ name: string, action: string, to: list(obj({ namespaces: labelSelector, pods: adminPods, ...opts.egressPeerFields })), [opts.portsField]: opts.ports });
  return obj({
    ...(opts.tier ? { tier: string } : {}),
    ...(opts.priority ? { priority: integer } : {}),
    subject: adminSubject,
    ingress: list(ingress),
    egress: list(egress),
  });
}
const destinationPort = obj({ number: integer, range: obj({ start: integer, end: integer }) });
const cnpProtocols = list(obj({
  tcp: obj({ destinationPort }),
  udp: obj({ destinationPort }),
  sctp: obj({ destinationPort }),
  destinationNamedPort: string,
}));

/** spec schema by "group/kind" (group "" for the core API). */
const SPEC_SCHEMAS = new Map<string, FieldSchema>([
  ['networking.k8s.io/NetworkPolicy', k8sNetworkPolicySpec],
  ['crd.antrea.io/Tier', obj({ priority: integer, description: string })],
  ['crd.antrea.io/ClusterNetworkPolicy', antreaPolicySpec],
  ['crd.antrea.io/NetworkPolicy', antreaPolicySpec],
  ['crd.antrea.io/ClusterGroup', obj({ ...antreaGroupFields, nodeSelector: labelSelector })],
  ['crd.antrea.io/Group', obj(antreaGroupFields)],
  ['policy.networking.k8s.io/AdminNetworkPolicy', adminSpec({
    priority: true, portsField: 'ports', ports: adminPorts,
    egressPeerFields: { nodes: labelSelector, networks: list(string), domainNames: list(string) },
  })],
  ['policy.networking.k8s.io/BaselineAdminNetworkPolicy', adminSpec({
    priority: false, portsField: 'ports', ports: adminPorts,
    egressPeerFields: { nodes: labelSelector, networks: list(string) },
  })],
  ['policy.networking.k8s.io/ClusterNetworkPolicy', adminSpec({
    tier: true, priority: true, portsField: 'protocols', ports: cnpProtocols,
    egressPeerFields: { nodes: labelSelector, networks: list(string), domainNames: list(string) },
  })],
]);

/** The whole object's schema for a kind, or undefined for kinds without one here. */
export function objectSchema(group: string, kind: string): FieldSchema | undefined {
  const spec = SPEC_SCHEMAS.get(`${group}/${kind}`);
  return spec && obj({ apiVersion: string, kind: string, metadata: any, spec, status: any });
}

/** The spec schema of a kind (for the CRDs). */
export function specSchema(group: string, kind: string): FieldSchema | undefined {
  return SPEC_SCHEMAS.get(`${group}/${kind}`);
}

const isPlainMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Field paths in `value` that `schema` does not have ("spec.podSelecter", "spec.ingress[0].frm").
 * Values of the wrong type are the normalizers' business (they reject them); here only names count.
 */
export function unknownFields(schema: FieldSchema, value: unknown, path = ''): string[] {
  const out: string[] = [];
  const walk = (s: FieldSchema, v: unknown, at: string): void => {
    if (s.type === 'object' && isPlainMap(v)) {
      for (const [k, x] of Object.entries(v)) {
        const field = at ? `${at}.${k}` : k;
        const fs = Object.hasOwn(s.fields, k) ? s.fields[k] : undefined;
        if (!fs) out.push(field);
        else walk(fs, x, field);
      }
    } else if (s.type === 'array' && Array.isArray(v)) {
      v.forEach((x, i) => walk(s.items, x, `${at}[${i}]`));
    } else if (s.type === 'map' && isPlainMap(v)) {
      for (const [k, x] of Object.entries(v)) walk(s.values, x, `${at}.${k}`);
    }
  };
  walk(schema, value, path);
  return out;
}

const EXPECTED: Record<string, string> = {
  string: 'a string', integer: 'an integer', number: 'a number', boolean: 'a boolean (true or false)',
  'int-or-string': 'a port number or name', array: 'a list', map: 'a map of strings', object: 'an object',
};

function expected(s: FieldSchema): string {
  if (s.type !== 'array') return EXPECTED[s.type]!;
  const item = s.items.type === 'array' || s.items.type === 'any' || s.items.type === 'int-or-string' ? '' : ` of ${s.items.type === 'map' || s.items.type === 'object' ? 'objects' : `${s.items.type}s`}`;
  return `a list${item}`;
}

function describe(v: unknown): string {
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a map';
  if (typeof v === 'string') return `a string (${JSON.stringify(v)})`;
  if (typeof v === 'number') return `a number (${v})`;
  return `a ${typeof v} (${String(v)})`;
}

function typeMatches(s: FieldSchema, v: unknown): boolean {
  switch (s.type) {
    case 'any': return true;
    case 'string': return typeof v === 'string';
    case 'integer': return typeof v === 'number' && Number.isInteger(v);
    case 'number': return typeof v === 'number';
    case 'boolean': return typeof v === 'boolean';
    case 'int-or-string': return typeof v === 'string' || (typeof v === 'number' && Number.isInteger(v));
    case 'array': return Array.isArray(v);
    case 'map': case 'object': return isPlainMap(v);
  }
}

/**
 * Values whose JSON type is not the field's (as the API server refuses to decode them: a boolean
 * where a label value belongs, a list where matchLabels' map belongs, a string where a list
 * belongs). null stands for an absent field, as in the API server. Unknown fields are not judged.
 */
export function wrongTypes(schema: FieldSchema, value: unknown, path = ''): { field: string; message: string }[] {
  const out: { field: string; message: string }[] = [];
  const walk = (s: FieldSchema, v: unknown, at: string): void => {
    if (v === null || v === undefined) return;
    if (!typeMatches(s, v)) {
      out.push({ field: at, message: `must be ${expected(s)}, not ${describe(v)}` });
      return;
    }
    if (s.type === 'object') {
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
        const fs = Object.hasOwn(s.fields, k) ? s.fields[k] : undefined;
        if (fs) walk(fs, x, at ? `${at}.${k}` : k);
      }
    } else if (s.type === 'array') {
      (v as unknown[]).forEach((x, i) => walk(s.items, x, `${at}[${i}]`));
    } else if (s.type === 'map') {
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) walk(s.values, x, `${at}.${k}`);
    }
  };
  walk(schema, value, path);
  return out;
}

/** `o` with own property `k` set to `v`, even for keys such as `__proto__`. */
function setOwn(o: Record<string, unknown>, k: string, v: unknown): void {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

/**
 * `value` as the API server stores it where a string map value or string list item is null. A
 * built-in kind (`builtin`: NetworkPolicy) is decoded into Go types, where null there becomes ""
 * (`matchLabels: {k: null}` selects k=""). A custom resource's structural schema drops a null map
 * value before validation (PruneNonNullableNullsWithoutDefaults: the key is gone) and refuses a
 * null list item (left to the normalizers). Copies only what changes; `pruned` lists the dropped keys.
 */
export function decodeNulls(schema: FieldSchema, value: unknown, builtin: boolean): { value: unknown; pruned: string[] } {
  const pruned: string[] = [];
  const walk = (s: FieldSchema, v: unknown, at: string): unknown => {
    if ((s.type === 'object' || s.type === 'map') && isPlainMap(v)) {
      let out: Record<string, unknown> | undefined;
      for (const [k, x] of Object.entries(v)) {
        const fs = s.type === 'map' ? s.values : Object.hasOwn(s.fields, k) ? s.fields[k] : undefined;
        if (!fs) continue;
        const field = at ? `${at}.${k}` : k;
        if (s.type === 'map' && x === null && fs.type === 'string') {
          out ??= { ...v };
          if (builtin) setOwn(out, k, '');
          else {
            delete out[k];
            pruned.push(field);
          }
          continue;
        }
        const y = walk(fs, x, field);
        if (y !== x) setOwn((out ??= { ...v }), k, y);
      }
      return out ?? v;
    }
    if (s.type === 'array' && Array.isArray(v)) {
      let out: unknown[] | undefined;
      v.forEach((x, i) => {
        const y = x === null && s.items.type === 'string' ? (builtin ? '' : x) : walk(s.items, x, `${at}[${i}]`);
        if (y !== x) (out ??= [...v])[i] = y;
      });
      return out ?? v;
    }
    return v;
  };
  return { value: walk(schema, value, ''), pruned };
}

/** A structural openAPIV3Schema for a CRD (unknown fields are pruned, as with the upstream CRDs). */
export function openApiSchema(s: FieldSchema): Record<string, unknown> {
  switch (s.type) {
    case 'any': return { type: 'object', 'x-kubernetes-preserve-unknown-fields': true };
    case 'int-or-string': return { 'x-kubernetes-int-or-string': true };
    case 'array': return { type: 'array', items: openApiSchema(s.items) };
    case 'map': return { type: 'object', additionalProperties: openApiSchema(s.values) };
    case 'object': return { type: 'object', properties: Object.fromEntries(Object.entries(s.fields).map(([k, f]) => [k, openApiSchema(f)])) };
    default: return { type: s.type };
  }
}
