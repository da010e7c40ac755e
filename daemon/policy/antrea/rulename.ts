/**
 * Rule names Antrea generates for rules without `name`.
 *
 * Antrea's mutating webhook names such a rule "<ingress|egress>-<action in lower case>-<hash>",
 * where <hash> is the first 7 hex digits of the SHA-1 of the rule serialized by Go's
 * encoding/json from the v1beta1 `Rule` struct (fields in struct order, empty optional fields
 * omitted, `enableLogging` always present, map keys sorted, HTML characters escaped). We
 * serialize the same way, from the v1beta1 Rule's field schema (schema.ts), so a policy applied without names gets the same rule names here as in a
 * real cluster (e.g. {action: Allow, from: [{podSelector: {matchLabels: {foo1: bar1}}}]} in
 * ingress -> "ingress-allow-c4f16d3", the value in Antrea's own tests).
 *
 * Identical unnamed rules in one direction therefore get the same name, which makes the policy
 * invalid (duplicate rule names), exactly as Antrea rejects it.
 */
import { createHash } from 'node:crypto';
import { ANTREA_RULE, type FieldSchema } from '../schema.js';

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

function stringMap(v: any): string | undefined {
  if (typeof v !== 'object' || v === null || Object.keys(v).length === 0) return undefined;
  const keys = Object.keys(v).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return `{${keys.map((k) => `${goString(k)}:${goString(String(v[k]))}`).join(',')}}`;
}

/** Go's encoding/json for a value of the field schema's type (struct fields in schema order). */
function goEncoder(s: FieldSchema): (v: any) => string | undefined {
  switch (s.type) {
    case 'string': return str;
    case 'integer': case 'number': return int;
    case 'boolean': return bool;
    case 'int-or-string': return intOrString;
    case 'array': return list(goEncoder(s.items));
    // A map with omitempty is left out when it has no keys.
    case 'map': return stringMap;
    case 'object': return struct(Object.entries(s.fields).map(([name, fs]): Field => {
      const encode = goEncoder(fs);
      if (!('always' in fs && fs.always)) return { name, omitEmpty: true, encode };
      return { name, omitEmpty: false, encode, zero: fs.type === 'boolean' ? 'false' : fs.type === 'string' ? '""' : 'null' };
    }));
    case 'any': return (v) => JSON.stringify(v);
  }
}

const rule = goEncoder(ANTREA_RULE);

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
