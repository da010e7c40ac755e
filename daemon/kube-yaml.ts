/**
 * YAML read (and written) the way kubectl reads it: sigs.k8s.io/yaml decodes with go-yaml v2 into
 * untyped values and converts the result to JSON. Every tool (sluicectl, sluice-lab, the agent's
 * config, the lab API server, the install generators, tests) goes through this module, so a manifest
 * means the same thing everywhere. Pure.
 *
 * go-yaml v2's resolution of plain (unquoted) scalars, which differs from js-yaml's YAML 1.2 core:
 * - booleans are YAML 1.1's: y/Y/yes/Yes/YES/on/On/ON/true/True/TRUE and n/N/no/.../off/OFF/false.
 *   `matchLabels: {debug: yes}` is therefore a boolean, which the API server rejects as a type error.
 * - null: "", ~, null, Null, NULL.
 * - integers as Go's strconv.ParseInt(s, 0, 64) after removing "_": 0755 is octal (493), 0x1F, 0o17,
 *   0b101; what does not parse as an integer but looks like a float is a float (1e3, 1.0, 08).
 *   .inf/.nan resolve to floats, which JSON cannot hold: the document is refused.
 * - timestamps stay strings (go-yaml v2 keeps them as the original text when decoding untyped).
 * - merge keys (<<) and anchors/aliases are supported; a document whose aliases expand too much is
 *   refused with go-yaml's own rule ("document contains excessive aliasing"), and so is an object
 *   larger than the API server accepts.
 * Map keys that resolve to other types become their string form ("true", "493"), as in
 * sigs.k8s.io/yaml; the result holds only JSON values, keys such as `__proto__` as own data.
 */
import yaml from 'js-yaml';

/** A YAML document that cannot be read as a Kubernetes object would be. */
export class KubeYamlError extends Error {
  override name = 'KubeYamlError';
}

const BOOLS = new Map<string, boolean>([
  ...['y', 'Y', 'yes', 'Yes', 'YES', 'true', 'True', 'TRUE', 'on', 'On', 'ON'].map((s) => [s, true] as const),
  ...['n', 'N', 'no', 'No', 'NO', 'false', 'False', 'FALSE', 'off', 'Off', 'OFF'].map((s) => [s, false] as const),
]);
const NULLS = new Set(['', '~', 'null', 'Null', 'NULL']);
const SPECIAL_FLOATS = new Map<string, number>([
  ...['.nan', '.NaN', '.NAN'].map((s) => [s, NaN] as const),
  ...['.inf', '.Inf', '.INF', '+.inf', '+.Inf', '+.INF'].map((s) => [s, Infinity] as const),
  ...['-.inf', '-.Inf', '-.INF'].map((s) => [s, -Infinity] as const),
]);
const YAML_STYLE_FLOAT = /^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$/;
const INT64_MAX = 2n ** 63n - 1n;
const UINT64_MAX = 2n ** 64n - 1n;

/** Go's strconv.ParseInt/ParseUint with base 0 (prefixes 0x, 0o, 0b, and a leading 0 for octal). */
function goParseInt(s: string): bigint | undefined {
  const m = /^([+-]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$/.exec(s);
  if (!m) return undefined;
  const sign = m[1] === '-' ? -1n : 1n;
  const body = m[2]!;
  let n: bigint;
  if (/^0[oO]/.test(body)) n = BigInt(`0o${body.slice(2)}`);
  else if (/^0[0-7]+$/.test(body)) n = BigInt(`0o${body.slice(1)}`);
  else n = BigInt(body);
  n *= sign;
  return n < -INT64_MAX - 1n || n > UINT64_MAX ? undefined : n;
}

/** What go-yaml v2 makes of a plain scalar: [tag, value]. */
export function resolvePlainScalar(s: string): ['null', null] | ['bool', boolean] | ['int' | 'float', number] | ['str', string] {
  if (NULLS.has(s)) return ['null', null];
  const b = BOOLS.get(s);
  if (b !== undefined) return ['bool', b];
  const special = SPECIAL_FLOATS.get(s);
  if (special !== undefined) return ['float', special];
  const first = s[0]!;
  if (first === '.') {
    const f = /^\.[0-9]+([eE][-+]?[0-9]+)?$/.test(s) ? Number(s) : NaN;
    return Number.isNaN(f) ? ['str', s] : ['float', f];
  }
  if (!/[-+0-9]/.test(first)) return ['str', s];
  const plain = s.replaceAll('_', '');
  const i = goParseInt(plain);
  if (i !== undefined) return ['int', Number(i)];
  if (YAML_STYLE_FLOAT.test(plain)) return ['float', Number(plain)];
  const bin = /^(-?)0b([01]+)$/.exec(plain);
  if (bin) return ['int', Number(BigInt(`0b${bin[2]}`)) * (bin[1] ? -1 : 1)];
  return ['str', s];
}

const plainType = (tag: 'null' | 'bool' | 'int' | 'float', opts: Pick<yaml.TypeConstructorOptions, 'predicate' | 'represent' | 'instanceOf'>) =>
  new yaml.Type(`tag:yaml.org,2002:${tag}`, {
    kind: 'scalar',
    resolve: (data: string | null) => resolvePlainScalar(data ?? '')[0] === tag,
    construct: (data: string | null) => resolvePlainScalar(data ?? '')[1],
    ...opts,
  });

// js-yaml exports its merge-key type at runtime; @types/js-yaml does not declare it.
const MERGE = (yaml as unknown as { types: { merge: yaml.Type } }).types.merge;

/** go-yaml v2's implicit types (no timestamps, no binary), plus merge keys. */
export const KUBE_YAML_SCHEMA = yaml.FAILSAFE_SCHEMA.extend({
  implicit: [
    plainType('null', { predicate: (v) => v === null, represent: () => 'null' }),
    plainType('bool', { predicate: (v) => typeof v === 'boolean', represent: (v) => String(v) }),
    plainType('int', { predicate: (v) => typeof v === 'number' && Number.isInteger(v), represent: (v) => String(v) }),
    plainType('float', { predicate: (v) => typeof v === 'number' && !Number.isInteger(v), represent: (v) => String(v) }),
    MERGE,
  ],
});

/** kube-apiserver's limit on a request body (and so on any one object it stores). */
export const MAX_OBJECT_BYTES = 3 * 1024 * 1024;

// go-yaml v2's alias limits (decode.go): below 400 000 decoded nodes up to 99% may come from
// aliases, falling linearly to 10% at 4 000 000; at least 100 alias nodes and 1 000 nodes first.
const ALIAS_RATIO_LOW = 400_000;
const ALIAS_RATIO_HIGH = 4_000_000;
function allowedAliasRatio(decodeCount: number): number {
  if (decodeCount <= ALIAS_RATIO_LOW) return 0.99;
  if (decodeCount >= ALIAS_RATIO_HIGH) return 0.1;
  return 0.99 - 0.89 * ((decodeCount - ALIAS_RATIO_LOW) / (ALIAS_RATIO_HIGH - ALIAS_RATIO_LOW));
}

/**
 * A fresh JSON value from a js-yaml result: aliases (shared objects) are copied and counted as
 * go-yaml counts them, the size is bounded, non-JSON numbers refused.
 */
function toJsonValue(root: unknown): unknown {
  const seen = new Set<object>();
  let decodeCount = 0;
  let aliasCount = 0;
  let bytes = 0;
  const visit = (v: unknown, aliasDepth: number, path: string): unknown => {
    decodeCount++;
    if (aliasDepth > 0) aliasCount++;
    if (aliasCount > 100 && decodeCount > 1000 && aliasCount / decodeCount > allowedAliasRatio(decodeCount)) {
      throw new KubeYamlError('document contains excessive aliasing');
    }
    if (bytes > MAX_OBJECT_BYTES) throw new KubeYamlError(`the object is larger than the API server accepts (${MAX_OBJECT_BYTES} bytes as JSON)`);
    if (v === null || typeof v === 'boolean') {
      bytes += 5;
      return v;
    }
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) throw new KubeYamlError(`${path || '(document)'}: ${v} cannot be represented in JSON`);
      bytes += 8;
      return v;
    }
    if (typeof v === 'string') {
      bytes += v.length + 2;
      return v;
    }
    if (typeof v !== 'object') throw new KubeYamlError(`${path || '(document)'}: unsupported YAML value (${typeof v})`);
    const depth = seen.has(v) ? aliasDepth + 1 : aliasDepth;
    seen.add(v);
    if (Array.isArray(v)) {
      bytes += 2;
      return v.map((x, i) => visit(x, depth, `${path}[${i}]`));
    }
    if (Object.getPrototypeOf(v) !== Object.prototype && Object.getPrototypeOf(v) !== null) {
      throw new KubeYamlError(`${path || '(document)'}: unsupported YAML value`);
    }
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      bytes += k.length + 4;
      // defineProperty: a key such as __proto__ is data, as in JSON.parse.
      Object.defineProperty(out, k, { value: visit(x, depth, path ? `${path}.${k}` : k), enumerable: true, writable: true, configurable: true });
    }
    return out;
  };
  return visit(root, 0, '');
}

/** One document of a stream (0-based `index`, 1-based first `line`): its JSON value, or why it cannot be read. */
export type YamlDocument = { index: number; line: number; value: unknown } | { index: number; line: number; error: string };

/**
 * Splits a stream into documents as kubectl's YAMLReader does: at lines that start with "---"
 * followed by nothing but spaces or a comment. Each document is then read on its own, so a syntax
 * error, excessive aliasing or an oversized object costs that document alone.
 */
export function parseYamlDocuments(text: string): YamlDocument[] {
  const chunks: { line: number; text: string; error?: string }[] = [];
  let current: string[] = [];
  let start = 1;
  const lines = text.split(/\r?\n/);
  const flush = (next: number) => {
    if (current.some((l) => l.trim() !== '' && !l.trimStart().startsWith('#'))) chunks.push({ line: start, text: current.join('\n') });
    current = [];
    start = next;
  };
  lines.forEach((l, i) => {
    if (!l.startsWith('---')) {
      current.push(l);
      return;
    }
    const rest = l.slice(3).trim();
    flush(i + 2);
    if (rest !== '' && !rest.startsWith('#')) chunks.push({ line: i + 1, text: '', error: `invalid YAML document separator: ${rest}` });
  });
  flush(lines.length + 1);
  return chunks.map((c, index) => {
    if (c.error !== undefined) return { index, line: c.line, error: c.error };
    try {
      const doc = yaml.load(c.text, { schema: KUBE_YAML_SCHEMA });
      return { index, line: c.line, value: toJsonValue(doc ?? null) };
    } catch (err) {
      const e = err as Error & { mark?: { line: number } };
      const where = e.mark ? ` (line ${c.line + e.mark.line})` : '';
      const why = e instanceof KubeYamlError ? e.message : `not valid YAML/JSON${where}: ${e.message.split('\n')[0]!.replace(/ \(\d+:\d+\)$/, '')}`;
      return { index, line: c.line, error: why };
    }
  });
}

/** A single YAML (or JSON) document as kubectl reads it; throws KubeYamlError. Empty text is null. */
export function parseYaml(text: string): unknown {
  const docs = parseYamlDocuments(text);
  if (docs.length > 1) throw new KubeYamlError(`expected one YAML document, found ${docs.length}`);
  const doc = docs[0];
  if (!doc) return null;
  if ('error' in doc) throw new KubeYamlError(doc.error);
  return doc.value ?? null;
}

/**
 * YAML that kubectl reads back as the same JSON value: a string that go-yaml would resolve to
 * another type (yes, 0755, 1e3, ~) is quoted.
 */
export function dumpYaml(value: unknown, opts: { lineWidth?: number } = {}): string {
  return yaml.dump(value, { schema: KUBE_YAML_SCHEMA, noRefs: true, lineWidth: opts.lineWidth ?? 80 });
}
