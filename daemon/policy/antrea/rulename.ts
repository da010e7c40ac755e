/**
 * Rule names Antrea generates for rules without `name`.
 *
 * Antrea's mutating webhook names such a rule "<ingress|egress>-<action in lower case>-<hash>",
 * where <hash> is the first 7 hex digits of the SHA-1 of the rule serialized by Go's
 * encoding/json from the v1beta1 `Rule` struct (fields in struct order, empty optional fields
 * omitted, `enableLogging` always present, map keys sorted, HTML characters escaped). We
 * serialize the same way, so a policy applied without names gets the same rule names here as in a
 * real cluster (e.g. {action: Allow, from: [{podSelector: {matchLabels: {foo1: bar1}}}]} in
 * ingress -> "ingress-allow-c4f16d3", the value in Antrea's own tests).
 *
 * Identical unnamed rules in one direction therefore get the same name, which makes the policy
 * invalid (duplicate rule names), exactly as Antrea rejects it.
 */
import { createHash } from 'node:crypto';

/** A Go struct field: JSON name, whether `omitempty`, and how to encode the value. */
interface Field {
  name: string;
  omitEmpty: boolean;
  encode: (v: any) => string | undefined;
  /** Encoding of the Go zero value when the field is absent and not omitempty. */
  zero?: string;
}

function goString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (c < 0x20 || ch === '<' || ch === '>' || ch === '&' || c === 0x2028 || c === 0x2029) {
      out += '\\u' + c.toString(16).padStart(4, '0');
    } else out += ch;
  }
  return out + '"';
}

const str = (v: any): string | undefined => (typeof v === 'string' ? goString(v) : undefined);
const int = (v: any): string | undefined => (typeof v === 'number' && Number.isFinite(v) ? String(Math.trunc(v)) : undefined);
const bool = (v: any): string => (v === true ? 'true' : 'false');
/** intstr.IntOrString: a number stays a number, a string stays a string. */
const intOrString = (v: any): string | undefined => (typeof v === 'string' ? goString(v) : int(v));

function list(encodeItem: (v: any) => string | undefined) {
  return (v: any): string | undefined => {
    if (!Array.isArray(v)) return undefined;
    return `[${v.map((x) => encodeItem(x) ?? 'null').join(',')}]`;
  };
}

/** Go's omitempty for the field kinds used here: empty string, empty slice/map (pointers to
 *  structs or numbers are omitted only when absent, so `podSelector: {}` and `icmpType: 0` stay). */
function isEmpty(v: unknown): boolean {
  return v === '' || (Array.isArray(v) && v.length === 0);
}

function struct(fields: Field[]) {
  return (v: any): string | undefined => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
    const parts: string[] = [];
    for (const f of fields) {
      const value = v[f.name];
      // Pointer/slice/string fields absent from the input are Go zero values.
      if (value === undefined || value === null) {
        if (f.omitEmpty) continue;
        parts.push(`${goString(f.name)}:${f.zero ?? 'null'}`);
        continue;
      }
      if (f.omitEmpty && isEmpty(value)) continue;
      const enc = f.encode(value);
      if (enc === undefined) continue;
      parts.push(`${goString(f.name)}:${enc}`);
    }
    return `{${parts.join(',')}}`;
  };
}

const f = (name: string, encode: Field['encode'], omitEmpty = true): Field =>
  omitEmpty ? { name, encode, omitEmpty } : { name, encode, omitEmpty, zero: encode === str ? '""' : 'null' };

function stringMap(v: any): string | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const keys = Object.keys(v).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return `{${keys.map((k) => `${goString(k)}:${goString(String(v[k]))}`).join(',')}}`;
}

const labelSelector = struct([
  { name: 'matchLabels', omitEmpty: true, encode: (v) => (Object.keys(v ?? {}).length === 0 ? undefined : stringMap(v)) },
  f('matchExpressions', list(struct([f('key', str, false), f('operator', str, false), f('values', list(str))]))),
]);
const namespacedName = struct([f('name', str), f('namespace', str)]);
const ipBlock = struct([f('cidr', str, false), f('except', list(str))]);
const peerNamespaces = struct([f('match', str), f('sameLabels', list(str))]);

const peer = struct([
  f('ipBlock', ipBlock),
  f('podSelector', labelSelector),
  f('namespaceSelector', labelSelector),
  f('namespaces', peerNamespaces),
  f('externalEntitySelector', labelSelector),
  f('group', str),
  f('fqdn', str),
  f('serviceAccount', namespacedName),
  f('nodeSelector', labelSelector),
  f('scope', str),
]);
const appliedTo = struct([
  f('podSelector', labelSelector),
  f('namespaceSelector', labelSelector),
  f('externalEntitySelector', labelSelector),
  f('group', str),
  f('serviceAccount', namespacedName),
  f('service', namespacedName),
  f('nodeSelector', labelSelector),
]);
const port = struct([f('protocol', str), f('port', intOrString), f('endPort', int), f('sourcePort', int), f('sourceEndPort', int)]);
const protocol = struct([
  f('icmp', struct([f('icmpType', int), f('icmpCode', int)])),
  f('igmp', struct([f('igmpType', int), f('groupAddress', str)])),
]);
const l7Protocol = struct([
  f('http', struct([f('host', str), f('method', str), f('path', str)])),
  f('tls', struct([f('sni', str)])),
]);
const peerService = struct([f('name', str), f('namespace', str), f('scope', str)]);

const rule = struct([
  f('action', str, false),
  f('ports', list(port)),
  f('protocols', list(protocol)),
  f('l7Protocols', list(l7Protocol)),
  f('from', list(peer)),
  f('to', list(peer)),
  f('toServices', list(peerService)),
  f('name', str),
  { name: 'enableLogging', omitEmpty: false, encode: bool, zero: 'false' },
  f('logLabel', str),
  f('appliedTo', list(appliedTo)),
]);

/** The rule as Go's encoding/json would print the v1beta1 Rule struct (name left out). */
export function goRuleJson(r: Record<string, unknown>): string {
  const { name: _ignored, ...rest } = r;
  return rule(rest)!;
}

/** Antrea's generated name for an unnamed rule. `prefix` is "ingress" or "egress". */
export function generatedRuleName(prefix: 'ingress' | 'egress', r: Record<string, unknown>): string {
  const hash = createHash('sha1').update(goRuleJson(r)).digest('hex').slice(0, 7);
  return `${prefix}-${String(r.action).toLowerCase()}-${hash}`;
}
