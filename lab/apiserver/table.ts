// Server-side printing: the meta.k8s.io/v1 Table a client gets when it asks for one (kubectl's
// `get` does, with Accept: application/json;as=Table;v=v1;g=meta.k8s.io). The columns are those
// kube-apiserver prints for the kinds a lab user reads most; every other kind gets Name and Age.
import type { ResourceType } from './resources.js';
import type { KObject } from './store.js';

interface Column { name: string; type: string; format?: string; description: string; priority: number }
type Cells = (string | number)[];
interface Printer { columns: Column[]; cells(o: KObject, now: number): Cells }

const col = (name: string, description: string, priority = 0, type = 'string', format?: string): Column => ({ name, type, ...(format ? { format } : {}), description, priority });
const nameCol = col('Name', 'Name must be unique within a namespace.', 0, 'string', 'name');
const ageCol = col('Age', 'CreationTimestamp is when this object was created.');

type Any = Record<string, unknown>;
const field = (o: unknown, ...path: string[]): unknown => path.reduce<unknown>((cur, p) => (cur && typeof cur === 'object' ? (cur as Any)[p] : undefined), o);
const list = (v: unknown): Any[] => (Array.isArray(v) ? (v as Any[]) : []);

/** kube's short duration: 45s, 5m3s, 3h12m, 4d5h, 2y10d. */
export function humanAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 ? `${m}m${s % 60}s` : `${m}m`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 8) return m % 60 ? `${h}h${m % 60}m` : `${h}h`;
  if (h < 48) return `${h}h`;
  const d = Math.floor(h / 24);
  if (d < 8) return h % 24 ? `${d}d${h % 24}h` : `${d}d`;
  if (d < 365 * 2) return `${d}d`;
  return `${Math.floor(d / 365)}y${d % 365 ? `${d % 365}d` : ''}`;
}

const age = (o: KObject, now: number): string => {
  const t = Date.parse(String(o.metadata.creationTimestamp ?? ''));
  return Number.isNaN(t) ? '<unknown>' : humanAge(now - t);
};
const orNone = (v: unknown): string => (v === undefined || v === null || v === '' ? '<none>' : String(v));

const podPrinter: Printer = {
  columns: [nameCol, col('Ready', 'The ready containers of all containers.'), col('Status', 'The Pod\'s phase, or why it is not running.'), col('Restarts', 'Container restarts.', 0, 'string'), ageCol,
    col('IP', 'The Pod\'s IP address.', 1), col('Node', 'The node the Pod is scheduled to.', 1), col('Nominated Node', 'Nominated by the scheduler.', 1), col('Readiness Gates', 'Readiness gates met.', 1)],
  cells(o, now) {
    const containers = list(field(o, 'spec', 'containers'));
    const statuses = list(field(o, 'status', 'containerStatuses'));
    const ready = statuses.filter((s) => s.ready === true).length;
    const restarts = statuses.reduce((n, s) => n + (typeof s.restartCount === 'number' ? s.restartCount : 0), 0);
    const status = o.metadata.deletionTimestamp ? 'Terminating' : String(field(o, 'status', 'reason') ?? field(o, 'status', 'phase') ?? 'Pending');
    const gates = list(field(o, 'spec', 'readinessGates'));
    return [o.metadata.name!, `${ready}/${containers.length}`, status, restarts, age(o, now), orNone(field(o, 'status', 'podIP')), orNone(field(o, 'spec', 'nodeName')), orNone(field(o, 'status', 'nominatedNodeName')), gates.length ? `0/${gates.length}` : '<none>'];
  },
};

const servicePorts = (o: KObject): string =>
  list(field(o, 'spec', 'ports')).map((p) => `${p.port}${p.nodePort ? `:${p.nodePort}` : ''}/${p.protocol ?? 'TCP'}`).join(',') || '<none>';
const selectorText = (sel: unknown): string => (sel && typeof sel === 'object' && Object.keys(sel).length ? Object.entries(sel as Any).map(([k, v]) => `${k}=${v}`).join(',') : '<none>');

const servicePrinter: Printer = {
  columns: [nameCol, col('Type', 'The Service type.'), col('Cluster-IP', 'The cluster IP.'), col('External-IP', 'External addresses.'), col('Port(s)', 'The Service ports.'), ageCol, col('Selector', 'The Pod selector.', 1)],
  cells: (o, now) => [o.metadata.name!, String(field(o, 'spec', 'type') ?? 'ClusterIP'), orNone(field(o, 'spec', 'clusterIP')), list(field(o, 'status', 'loadBalancer', 'ingress')).map((i) => i.ip ?? i.hostname).join(',') || '<none>', servicePorts(o), age(o, now), selectorText(field(o, 'spec', 'selector'))],
};

const nodePrinter: Printer = {
  columns: [nameCol, col('Status', 'The node\'s Ready condition.'), col('Roles', 'node-role.kubernetes.io labels.'), ageCol, col('Version', 'The kubelet version.'), col('Internal-IP', 'The node\'s InternalIP.', 1)],
  cells(o, now) {
    const ready = list(field(o, 'status', 'conditions')).find((c) => c.type === 'Ready');
    const roles = Object.keys(o.metadata.labels ?? {}).filter((l) => l.startsWith('node-role.kubernetes.io/')).map((l) => l.slice('node-role.kubernetes.io/'.length));
    const internal = list(field(o, 'status', 'addresses')).filter((a) => a.type === 'InternalIP').map((a) => a.address).join(',');
    return [o.metadata.name!, ready?.status === 'True' ? 'Ready' : 'NotReady', roles.join(',') || '<none>', age(o, now), orNone(field(o, 'status', 'nodeInfo', 'kubeletVersion')), orNone(internal)];
  },
};

const namespacePrinter: Printer = {
  columns: [nameCol, col('Status', 'The namespace\'s phase.'), ageCol],
  cells: (o, now) => [o.metadata.name!, String(field(o, 'status', 'phase') ?? 'Active'), age(o, now)],
};

const networkPolicyPrinter: Printer = {
  columns: [nameCol, col('Pod-Selector', 'The Pods the policy applies to.'), ageCol],
  cells: (o, now) => [o.metadata.name!, selectorText(field(o, 'spec', 'podSelector', 'matchLabels')), age(o, now)],
};

const eventPrinter: Printer = {
  columns: [col('Last Seen', 'When it was last seen.'), col('Type', 'Normal or Warning.'), col('Reason', 'Why.'), col('Object', 'What it is about.'), col('Message', 'What happened.'), nameCol],
  cells(o, now) {
    const last = Date.parse(String(o.lastTimestamp ?? o.eventTime ?? o.metadata.creationTimestamp ?? ''));
    const obj = (o.involvedObject ?? {}) as Any;
    return [Number.isNaN(last) ? '<unknown>' : humanAge(now - last), String(o.type ?? ''), String(o.reason ?? ''), `${String(obj.kind ?? '').toLowerCase()}/${obj.name ?? ''}`, String(o.message ?? ''), o.metadata.name!];
  },
};

const defaultPrinter: Printer = { columns: [nameCol, ageCol], cells: (o, now) => [o.metadata.name!, age(o, now)] };

const printers: Record<string, Printer> = {
  '/pods': podPrinter, '/services': servicePrinter, '/nodes': nodePrinter, '/namespaces': namespacePrinter, '/events': eventPrinter,
  'networking.k8s.io/networkpolicies': networkPolicyPrinter,
};

/** Whether an Accept header asks for a meta.k8s.io/v1 Table. */
export const wantsTable = (accept: string | undefined): boolean => /as=Table;\s*v=v1;\s*g=meta\.k8s\.io/.test(accept ?? '');

/** The Table of `objects` (already presented); each row carries its object, as includeObject=Object does. */
export function toTable(rt: ResourceType, objects: KObject[], resourceVersion: string, now = Date.now()): Record<string, unknown> {
  const p = printers[rt.storageKey] ?? defaultPrinter;
  return {
    kind: 'Table', apiVersion: 'meta.k8s.io/v1', metadata: { resourceVersion },
    columnDefinitions: p.columns,
    rows: objects.map((o) => ({ cells: p.cells(o, now), object: o })),
  };
}
