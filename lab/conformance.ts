/**
 * Runner for the upstream Kubernetes NetworkPolicy e2e cases re-expressed as data
 * (test/fixtures/k8s-netpol.json): builds the x/y/z × a/b/c model, substitutes the
 * Pod-IP placeholders, executes the steps in order against a Driver and compares each `expect`
 * step's full 9×9 matrix. The Driver decides how reachability is measured: the in-process
 * engine (EngineDriver, below), `sluicectl simulate`, or the lab with real packets.
 */
import { formatCidr, parseCidr } from '../daemon/policy/cidr.js';
import { PolicyEngine } from '../daemon/policy/engine.js';
import type { KubeObject } from '../daemon/policy/types.js';

export interface ConformanceModel {
  namespaces: { name: string; labels: Record<string, string> }[];
  pods: { namespace: string; name: string; labels: Record<string, string>; containers: { name: string; containerPort: number; protocol: string; portName: string }[] }[];
  services: { namespace: string; name: string; type?: string; selector: Record<string, string>; ports: { name: string; port: number; protocol: string }[] }[];
  ports: number[];
  protocols: string[];
}

export interface ExpectStep {
  port: number;
  protocol: 'TCP' | 'UDP' | 'SCTP';
  default: boolean;
  exceptions: { from: string; to: string; allowed: boolean }[];
}

export type Step =
  | { apply: KubeObject[]; op?: string; note?: string }
  | { delete: { apiVersion: string; kind: string; namespace?: string | undefined; name: string }[]; note?: string }
  | { label: { kind: 'Pod' | 'Namespace'; namespace?: string | undefined; name: string; add: Record<string, string> } }
  | { expect: ExpectStep };

export interface ConformanceCase {
  id: string;
  name: string;
  needs: string[];
  steps: Step[];
}

export interface ConformanceSuite {
  suite: string;
  model: ConformanceModel;
  cases: ConformanceCase[];
}

/** How a runner measures reachability; every method may be async (the lab sends packets). */
export interface Driver {
  /** Creates the model's objects (with the Pod IPs the driver will report through podIp). */
  setUp(objects: KubeObject[]): Promise<void> | void;
  apply(objects: KubeObject[]): Promise<void> | void;
  delete(refs: { apiVersion: string; kind: string; namespace?: string | undefined; name: string }[]): Promise<void> | void;
  /** Replaces a Pod or Namespace with one carrying the merged labels. */
  relabel(obj: KubeObject): Promise<void> | void;
  /** Reachability for each (from, to) pair, keyed "from>to" with "ns/pod" names. */
  probe(pairs: [string, string][], port: number, protocol: ExpectStep['protocol']): Promise<Map<string, boolean>> | Map<string, boolean>;
}

/** Default Pod addresses for offline runs: 10.244.<namespace index + 1>.<pod index + 10>. */
export function defaultPodIp(model: ConformanceModel, namespace: string, name: string): string {
  const ns = model.namespaces.findIndex((n) => n.name === namespace);
  const pod = model.pods.filter((p) => p.namespace === namespace).findIndex((p) => p.name === name);
  if (ns < 0 || pod < 0) throw new Error(`conformance model has no Pod ${namespace}/${name}`);
  return `10.244.${ns + 1}.${pod + 10}`;
}

/**
 * Addresses for an offline IPv6-only run: fd00:10:244:<namespace index + 1>::<pod index + 10>
 * (hex), every Pod inside fd00::/8 as the IPv4 ones are inside 10.0.0.0/8.
 */
export function defaultPodIpv6(model: ConformanceModel, namespace: string, name: string): string {
  const [, ns, pod] = /^10\.244\.(\d+)\.(\d+)$/.exec(defaultPodIp(model, namespace, name))!;
  return `fd00:10:244:${ns}::${Number(pod).toString(16)}`;
}

/**
 * The model as Kubernetes objects. `podIps` gives each Pod's addresses (omit for real clusters):
 * the first is status.podIP, all of them status.podIPs (a dual-stack Pod has one per family).
 */
export function modelObjects(model: ConformanceModel, podIps?: (ns: string, name: string) => string | string[]): KubeObject[] {
  const objs: KubeObject[] = [];
  for (const ns of model.namespaces) objs.push({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns.name, labels: { ...ns.labels } } });
  model.pods.forEach((p) => {
    objs.push({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: p.name, namespace: p.namespace, labels: { ...p.labels } },
      spec: {
        containers: p.containers.map((c) => ({ name: c.name, image: 'agnhost', ports: [{ name: c.portName, containerPort: c.containerPort, protocol: c.protocol }] })),
      },
      ...(podIps ? { status: podStatus(podIps(p.namespace, p.name)) } : {}),
    });
  });
  for (const s of model.services) {
    objs.push({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: s.name, namespace: s.namespace },
      spec: { type: s.type ?? 'ClusterIP', selector: { ...s.selector }, ports: s.ports.map((p) => ({ ...p, targetPort: p.port })) },
    });
  }
  return objs;
}

function podStatus(ips: string | string[]): Record<string, unknown> {
  const list = typeof ips === 'string' ? [ips] : ips;
  return { phase: 'Running', podIP: list[0], podIPs: list.map((ip) => ({ ip })) };
}

/** Replaces {{podHostCIDR:ns/pod}} and {{podPrefixCIDR:ns/pod:bits}} in every string of `value`. */
export function substitutePlaceholders<T>(value: T, podIp: (ns: string, name: string) => string): T {
  const fill = (s: string) =>
    s
      .replace(/\{\{podHostCIDR:([^/}]+)\/([^}]+)\}\}/g, (_m, ns: string, name: string) => {
        const ip = podIp(ns, name);
        return `${ip}/${ip.includes(':') ? 128 : 32}`;
      })
      .replace(/\{\{podPrefixCIDR:([^/}]+)\/([^:}]+):(\d+)\}\}/g, (_m, ns: string, name: string, bits: string) => prefixCidr(podIp(ns, name), Number(bits)));
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return fill(v);
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    return v;
  };
  return walk(value) as T;
}

/**
 * The /bits network holding `ip`. For IPv6 the same prefix length is applied to the 128-bit
 * address: with the IPv6 model's addresses (all in fd00::/8) a /4 holds every Pod, as it does in
 * the IPv4 model, so the upstream expectations stand unchanged.
 */
function prefixCidr(ip: string, bits: number): string {
  if (ip.includes(':')) {
    const c = parseCidr(`${ip}/${bits}`);
    if (!c) throw new Error(`podPrefixCIDR: ${ip}/${bits} is not a CIDR`);
    return formatCidr(c);
  }
  const n = ip.split('.').reduce((acc, o) => acc * 256 + Number(o), 0);
  const size = 2 ** (32 - bits);
  const net = Math.floor(n / size) * size;
  return `${[24, 16, 8, 0].map((s) => Math.floor(net / 2 ** s) % 256).join('.')}/${bits}`;
}

/** Every ordered pair of model Pods, loopback excluded (upstream ignores it). */
export function modelPairs(model: ConformanceModel): [string, string][] {
  const pods = model.pods.map((p) => `${p.namespace}/${p.name}`);
  return pods.flatMap((from) => pods.filter((to) => to !== from).map((to): [string, string] => [from, to]));
}

export function expectedMatrix(model: ConformanceModel, expect: ExpectStep): Map<string, boolean> {
  const m = new Map<string, boolean>();
  for (const [from, to] of modelPairs(model)) m.set(`${from}>${to}`, expect.default);
  for (const e of expect.exceptions) if (e.from !== e.to) m.set(`${e.from}>${e.to}`, e.allowed);
  return m;
}

export interface ExpectOutcome {
  step: number;
  port: number;
  protocol: string;
  expected: Map<string, boolean>;
  actual: Map<string, boolean>;
  /** "from>to: expected allowed, got blocked" for each wrong cell. */
  mismatches: string[];
}

/** Runs one case from a fresh model; returns one outcome per expect step. */
export async function runCase(
  suite: ConformanceSuite,
  c: ConformanceCase,
  driver: Driver,
  podIp: (ns: string, name: string) => string = (ns, name) => defaultPodIp(suite.model, ns, name),
  withIps = true,
  /** Every address of a Pod (dual-stack models); default: podIp's one. */
  podIps?: (ns: string, name: string) => string[],
): Promise<ExpectOutcome[]> {
  const objects = modelObjects(suite.model, withIps ? (podIps ?? podIp) : undefined);
  const current = new Map(objects.map((o) => [`${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`, o]));
  await driver.setUp(objects);
  const outcomes: ExpectOutcome[] = [];
  for (const [i, step] of c.steps.entries()) {
    if ('apply' in step) {
      await driver.apply(substitutePlaceholders(step.apply, podIp));
    } else if ('delete' in step) {
      await driver.delete(step.delete);
    } else if ('label' in step) {
      const l = step.label;
      const key = `${l.kind}/${l.kind === 'Namespace' ? '' : l.namespace ?? 'default'}/${l.name}`;
      const obj = current.get(key);
      if (!obj) throw new Error(`${c.id} step ${i}: no ${l.kind} ${l.namespace ? `${l.namespace}/` : ''}${l.name} to label`);
      const next: KubeObject = { ...obj, metadata: { ...obj.metadata, labels: { ...obj.metadata.labels, ...l.add } } };
      current.set(key, next);
      await driver.relabel(next);
    } else if ('expect' in step) {
      const e = step.expect;
      const expected = expectedMatrix(suite.model, e);
      const actual = await driver.probe(modelPairs(suite.model), e.port, e.protocol);
      const mismatches: string[] = [];
      for (const [pair, want] of expected) {
        const got = actual.get(pair);
        if (got !== want) mismatches.push(`${pair}: expected ${want ? 'allowed' : 'blocked'}, got ${got === undefined ? 'nothing' : got ? 'allowed' : 'blocked'}`);
      }
      outcomes.push({ step: i, port: e.port, protocol: e.protocol, expected, actual, mismatches });
    }
  }
  return outcomes;
}

/** Drives the in-process PolicyEngine (what `sluicectl simulate` uses). */
export class EngineDriver implements Driver {
  engine = new PolicyEngine();

  /** `family`: judge every probe for that address family (dual-stack models). */
  constructor(private readonly family?: 4 | 6) {}

  setUp(objects: KubeObject[]): void {
    this.engine = new PolicyEngine();
    for (const o of objects) this.engine.upsert(o);
  }

  apply(objects: KubeObject[]): void {
    for (const o of objects) this.engine.upsert(o);
  }

  delete(refs: { apiVersion: string; kind: string; namespace?: string | undefined; name: string }[]): void {
    for (const r of refs) this.engine.remove(r);
  }

  relabel(obj: KubeObject): void {
    this.engine.upsert(obj);
  }

  probe(pairs: [string, string][], port: number, protocol: ExpectStep['protocol']): Map<string, boolean> {
    const out = new Map<string, boolean>();
    for (const [from, to] of pairs) out.set(`${from}>${to}`, this.engine.evaluate({ from, to, port, protocol, ...(this.family ? { family: this.family } : {}) }).verdict === 'allow');
    return out;
  }
}
