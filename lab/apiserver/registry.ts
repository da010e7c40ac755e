// REST semantics on top of the object store: what create/update/patch/delete do to an object
// of each kind (server-set metadata, defaults, ClusterIP allocation, namespace cascade, CRD
// serving) and the Kubernetes Status errors they fail with. No HTTP here.
import { randomUUID } from 'node:crypto';
import { formatCidr, formatIp, parseCidr, parseIp } from '../../daemon/policy/cidr.js';
import { applyPatch, deepEqual, PatchError } from './patch.js';
import {
  builtinTypes, compareKubeVersions, crdProblem, crdStorageKey, seedCrds, typesFromCrd, type ResourceType,
} from './resources.js';
import { APISERVICE_STORAGE_KEY, apiServiceProblem, defaultApiService } from './apiservice.js';
import { parseFieldSelector, parseLabelSelector, SelectorError } from './selectors.js';
import { objectKey, type KObject, type ObjectMeta, type ObjectStore } from './store.js';

/** A failure the API reports as a Kubernetes Status object. */
export class ApiError extends Error {
  constructor(readonly code: number, readonly reason: string, message: string,
    readonly details?: Record<string, unknown>) {
    super(message);
  }

  toStatus(): Record<string, unknown> {
    return {
      kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: this.message,
      reason: this.reason, ...(this.details ? { details: this.details } : {}), code: this.code,
    };
  }
}

const notFound = (rt: ResourceType, name: string) =>
  new ApiError(404, 'NotFound', `${qualified(rt)} "${name}" not found`, { name, group: rt.group, kind: rt.plural });
const qualified = (rt: ResourceType) => (rt.group ? `${rt.plural}.${rt.group}` : rt.plural);
const invalid = (rt: ResourceType, name: string, field: string, message: string) =>
  new ApiError(422, 'Invalid', `${rt.kind} "${name}" is invalid: ${field}: ${message}`, {
    name, group: rt.group, kind: rt.kind, causes: [{ reason: 'FieldValueInvalid', message, field }],
  });
const badRequest = (message: string) => new ApiError(400, 'BadRequest', message);

/**
 * Kinds whose PUT must name the resourceVersion it replaces (their strategy refuses unconditional
 * updates, as Kubernetes' Lease strategy does): two leader-election candidates writing blind would
 * both believe they hold the lock.
 */
const conditionalUpdateOnly = new Set(['coordination.k8s.io/leases']);

/** An APIService is defaulted and checked on create and on update alike. */
function assertValidApiService(rt: ResourceType, obj: KObject): void {
  defaultApiService(obj);
  const problem = apiServiceProblem(obj);
  if (problem) throw invalid(rt, obj.metadata.name!, problem.field, problem.message);
}

/** A CustomResourceDefinition is checked on create and on update alike. */
function assertValidCrd(rt: ResourceType, crd: KObject): void {
  const problem = crdProblem(crd);
  if (problem) throw invalid(rt, crd.metadata.name!, problem.field, problem.message);
}

const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const dnsLabel = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const dns1035Label = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;

function nameProblem(rt: ResourceType, name: string): string | undefined {
  if (rt.storageKey === '/namespaces') {
    return dnsLabel.test(name) && name.length <= 63 ? undefined
      : 'a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \'-\', start and end with an alphanumeric character, at most 63 characters';
  }
  if (rt.storageKey === '/services') {
    return dns1035Label.test(name) && name.length <= 63 ? undefined
      : 'a DNS-1035 label must consist of lower case alphanumeric characters or \'-\', start with a letter and end with an alphanumeric character, at most 63 characters';
  }
  return dnsSubdomain.test(name) && name.length <= 253 ? undefined
    : 'a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \'-\' or \'.\', and must start and end with an alphanumeric character';
}

const generateSuffixChars = 'bcdfghjklmnpqrstvwxz2456789';
const randomSuffix = () => Array.from({ length: 5 }, () => generateSuffixChars[Math.floor(Math.random() * generateSuffixChars.length)]).join('');
const now = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** Everything but metadata and status: a change there bumps metadata.generation. */
function specPart(obj: KObject): Record<string, unknown> {
  const { metadata: _m, status: _s, apiVersion: _a, kind: _k, ...rest } = obj;
  return rest;
}

type IpFamilyName = 'IPv4' | 'IPv6';
const familyName = (f: 4 | 6): IpFamilyName => (f === 4 ? 'IPv4' : 'IPv6');

/** One Service CIDR: its family, first address and size. */
export interface ServiceRange { family: IpFamilyName; base: bigint; size: bigint; cidr: string }

/**
 * The ClusterIP ranges, as kube-apiserver's --service-cluster-ip-range takes them: one CIDR, or
 * two of different families separated by a comma (dual-stack; the first is the primary family).
 * IPv4 between /8 and /30, IPv6 between /64 and /124.
 */
export function parseServiceCIDRs(text: string): ServiceRange[] {
  const parts = text.split(',').map((p) => p.trim());
  const ranges = parts.map((cidr) => {
    const c = parseCidr(cidr);
    const ok = c && (c.family === 4 ? c.prefix >= 8 && c.prefix <= 30 : c.prefix >= 64 && c.prefix <= 124);
    if (!c || !ok) throw new Error(`serviceCIDR "${cidr}" must be an IPv4 CIDR with a prefix length between /8 and /30 or an IPv6 CIDR between /64 and /124`);
    return { family: familyName(c.family), base: c.start, size: c.end - c.start + 1n, cidr: formatCidr(c) };
  });
  if (ranges.length > 2 || (ranges.length === 2 && ranges[0]!.family === ranges[1]!.family)) {
    throw new Error(`serviceCIDR "${text}" must be one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma`);
  }
  return ranges;
}

/** The canonical form of an address of `family`, or undefined. */
function canonicalIp(ip: string, family: IpFamilyName): string | undefined {
  const parsed = parseIp(ip);
  return parsed && familyName(parsed.family) === family ? formatIp(parsed.family, parsed.value) : undefined;
}

export interface Selection { labelSelector?: string | undefined; fieldSelector?: string | undefined }

export class Registry {
  /** The primary family's range first. */
  private readonly serviceRanges: ServiceRange[];
  /** Types defined by CRD objects; recomputed after any CRD change. */
  private crdTypes: ResourceType[] | undefined;

  constructor(readonly store: ObjectStore, serviceCIDR: string) {
    this.serviceRanges = parseServiceCIDRs(serviceCIDR);
    store.subscribe((e) => {
      if (e.resource === crdStorageKey) this.crdTypes = undefined;
    });
  }

  /** Creates what a fresh cluster has (system namespaces) and, if asked, the policy CRDs; existing objects are kept. */
  seed(installCRDs: boolean): void {
    const nsType = this.resolve('', 'v1', 'namespaces')!;
    for (const name of ['default', 'kube-system', 'kube-public', 'kube-node-lease']) {
      if (!this.store.get('/namespaces', name)) this.create(nsType, undefined, { metadata: { name } });
    }
    // As kube-apiserver 1.33 does from --service-cluster-ip-range: the default ServiceCIDR.
    const scType = this.resolve('networking.k8s.io', 'v1', 'servicecidrs')!;
    if (!this.store.get(scType.storageKey, 'kubernetes')) {
      this.create(scType, undefined, { metadata: { name: 'kubernetes' }, spec: { cidrs: this.serviceRanges.map((r) => r.cidr) } } as never);
    }
    if (!installCRDs) return;
    const crdType = this.resolve('apiextensions.k8s.io', 'v1', 'customresourcedefinitions')!;
    for (const crd of seedCrds()) {
      if (!this.store.get(crdStorageKey, crd.metadata.name!)) this.create(crdType, undefined, crd);
    }
  }

  /** Every resource currently served: the built-ins and each served version of each CRD. */
  servedTypes(): ResourceType[] {
    this.crdTypes ??= this.store.list(crdStorageKey).flatMap(typesFromCrd);
    return [...builtinTypes, ...this.crdTypes];
  }

  resolve(group: string, version: string, plural: string): ResourceType | undefined {
    return this.servedTypes().find((t) => t.group === group && t.version === version && t.plural === plural);
  }

  /** Served group versions, preferred (highest) version first within each group. */
  groupVersions(): Map<string, string[]> {
    const groups = new Map<string, string[]>();
    for (const t of this.servedTypes()) {
      const versions = groups.get(t.group) ?? [];
      if (!versions.includes(t.version)) versions.push(t.version);
      groups.set(t.group, versions);
    }
    for (const versions of groups.values()) versions.sort(compareKubeVersions);
    return groups;
  }

  /** The object as clients see it through this resource's group/version. */
  present(rt: ResourceType, obj: KObject): KObject {
    const { apiVersion: _a, kind: _k, ...rest } = obj;
    return { apiVersion: rt.apiVersion, kind: rt.kind, ...rest } as KObject;
  }

  /** Builds the filter for a list or watch; bad selectors are 400 BadRequest. */
  matcher(rt: ResourceType, namespace: string | undefined, sel: Selection): (obj: KObject) => boolean {
    try {
      const labels = parseLabelSelector(sel.labelSelector);
      const fields = parseFieldSelector(sel.fieldSelector, rt.storageKey);
      return (obj) => (namespace === undefined || obj.metadata.namespace === namespace)
        && labels(obj.metadata.labels) && fields(obj as Record<string, unknown>);
    } catch (e) {
      if (e instanceof SelectorError) throw badRequest(`unable to parse requirement: ${e.message}`);
      throw e;
    }
  }

  list(rt: ResourceType, namespace: string | undefined, sel: Selection): KObject[] {
    const matches = this.matcher(rt, namespace, sel);
    return this.store.list(rt.storageKey, matches)
      .sort((a, b) => objectKey(a.metadata).localeCompare(objectKey(b.metadata)));
  }

  private key(rt: ResourceType, namespace: string | undefined, name: string): string {
    return objectKey({ name, namespace: rt.namespaced ? namespace : undefined });
  }

  get(rt: ResourceType, namespace: string | undefined, name: string): KObject {
    const obj = this.store.get(rt.storageKey, this.key(rt, namespace, name));
    if (!obj) throw notFound(rt, name);
    return obj;
  }

  /** Checks that a request body is an object of this resource; fills in apiVersion/kind when absent. */
  private checkBody(rt: ResourceType, body: unknown, namespace: string | undefined): KObject {
    if (!isRecord(body)) throw badRequest(`the request body must be a JSON object (a ${rt.kind})`);
    const obj = body as KObject;
    if (!isRecord(obj.metadata)) obj.metadata = {};
    const name = typeof obj.metadata.name === 'string' ? obj.metadata.name : '';
    if (obj.kind !== undefined && obj.kind !== rt.kind) {
      throw invalid(rt, name, 'kind', `Invalid value: "${String(obj.kind)}": must be ${rt.kind} for ${qualified(rt)}`);
    }
    if (obj.apiVersion !== undefined && obj.apiVersion !== rt.apiVersion) {
      throw invalid(rt, name, 'apiVersion', `Invalid value: "${String(obj.apiVersion)}": must be ${rt.apiVersion} on this path`);
    }
    if (rt.namespaced) {
      if (obj.metadata.namespace !== undefined && obj.metadata.namespace !== '' && obj.metadata.namespace !== namespace) {
        throw badRequest(`the namespace of the provided object (${String(obj.metadata.namespace)}) does not match the namespace sent on the request (${namespace})`);
      }
      obj.metadata.namespace = namespace;
    } else {
      delete obj.metadata.namespace;
    }
    return obj;
  }

  create(rt: ResourceType, namespace: string | undefined, body: unknown): KObject {
    if (rt.namespaced && !namespace) throw new ApiError(405, 'MethodNotAllowed', `create ${qualified(rt)} needs a namespace in the path`);
    const obj = this.checkBody(rt, body, namespace);
    const meta = obj.metadata;
    if ((meta.name === undefined || meta.name === '') && typeof meta.generateName === 'string' && meta.generateName !== '') {
      do meta.name = meta.generateName + randomSuffix();
      while (this.store.get(rt.storageKey, this.key(rt, namespace, meta.name)));
    }
    if (typeof meta.name !== 'string' || meta.name === '') {
      throw invalid(rt, '', 'metadata.name', 'Required value: name or generateName is required');
    }
    const problem = nameProblem(rt, meta.name);
    if (problem) throw invalid(rt, meta.name, 'metadata.name', `Invalid value: "${meta.name}": ${problem}`);
    if (meta.resourceVersion !== undefined && meta.resourceVersion !== '') {
      throw badRequest('resourceVersion should not be set on objects to be created');
    }
    if (rt.namespaced && !this.store.get('/namespaces', namespace!)) {
      throw new ApiError(404, 'NotFound', `namespaces "${namespace}" not found`, { name: namespace, kind: 'namespaces' });
    }
    if (this.store.get(rt.storageKey, this.key(rt, namespace, meta.name))) {
      throw new ApiError(409, 'AlreadyExists', `${qualified(rt)} "${meta.name}" already exists`, { name: meta.name, group: rt.group, kind: rt.plural });
    }
    delete meta.resourceVersion;
    delete meta.deletionTimestamp;
    meta.uid = randomUUID();
    meta.creationTimestamp = now();
    meta.generation = 1;
    obj.apiVersion = rt.apiVersion;
    obj.kind = rt.kind;
    this.prepareForCreate(rt, obj);
    const stored = this.store.write(rt.storageKey, obj);
    if (rt.storageKey === '/namespaces') {
      const sa = this.resolve('', 'v1', 'serviceaccounts')!;
      this.create(sa, meta.name, { metadata: { name: 'default' } });
    }
    return stored;
  }

  /** PUT of the main resource (subresource undefined) or of its status. */
  update(rt: ResourceType, namespace: string | undefined, name: string, body: unknown, subresource?: 'status'): KObject {
    const existing = this.get(rt, namespace, name);
    const obj = this.checkBody(rt, body, namespace);
    if (obj.metadata.name !== undefined && obj.metadata.name !== name) {
      throw badRequest(`the name of the object (${String(obj.metadata.name)}) does not match the name on the URL (${name})`);
    }
    const rv = obj.metadata.resourceVersion;
    if ((rv === undefined || rv === '') && conditionalUpdateOnly.has(rt.storageKey)) {
      throw invalid(rt, name, 'metadata.resourceVersion', 'Invalid value: 0x0: must be specified for an update');
    }
    if (rv !== undefined && rv !== '' && rv !== existing.metadata.resourceVersion) {
      throw new ApiError(409, 'Conflict',
        `Operation cannot be fulfilled on ${qualified(rt)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
        { name, group: rt.group, kind: rt.plural });
    }
    let next: KObject;
    if (subresource === 'status') {
      next = { ...existing, status: obj.status };
      if (obj.status === undefined) delete next.status;
    } else {
      const serverSet: ObjectMeta = {
        name, namespace: existing.metadata.namespace, uid: existing.metadata.uid,
        creationTimestamp: existing.metadata.creationTimestamp, generation: existing.metadata.generation,
        resourceVersion: existing.metadata.resourceVersion,
      };
      next = { ...obj, apiVersion: rt.apiVersion, kind: rt.kind, metadata: { ...obj.metadata, ...serverSet } };
      if (!rt.namespaced) delete next.metadata.namespace;
      if (rt.statusSubresource) {
        if (existing.status === undefined) delete next.status;
        else next.status = existing.status;
      }
      this.prepareForUpdate(rt, next, existing);
      if (!deepEqual(specPart(next), specPart(existing))) next.metadata.generation = (existing.metadata.generation ?? 0) + 1;
    }
    next.apiVersion = existing.apiVersion;
    // A no-op write keeps the resourceVersion and sends no event, as Kubernetes does.
    if (deepEqual(next, existing)) return existing;
    return this.store.write(rt.storageKey, next);
  }

  patch(rt: ResourceType, namespace: string | undefined, name: string, contentType: string, patch: unknown, subresource?: 'status'): KObject {
    const existing = this.present(rt, this.get(rt, namespace, name));
    let patched: unknown;
    try {
      patched = applyPatch(existing, contentType, patch);
    } catch (e) {
      if (!(e instanceof PatchError)) throw e;
      if (e.invalid) throw badRequest(e.message);
      throw new ApiError(422, 'Invalid', `${rt.kind} "${name}" could not be patched: ${e.message}`, { name, group: rt.group, kind: rt.kind });
    }
    return this.update(rt, namespace, name, patched, subresource);
  }

  delete(rt: ResourceType, namespace: string | undefined, name: string, options?: unknown): KObject {
    const existing = this.get(rt, namespace, name);
    const pre = isRecord(options) && isRecord(options.preconditions) ? options.preconditions : {};
    for (const field of ['resourceVersion', 'uid'] as const) {
      if (pre[field] !== undefined && pre[field] !== existing.metadata[field]) {
        throw new ApiError(409, 'Conflict',
          `Operation cannot be fulfilled on ${qualified(rt)} "${name}": Precondition failed: ${field}: ${String(pre[field])}, object's ${field}: ${String(existing.metadata[field])}`,
          { name, group: rt.group, kind: rt.plural });
      }
    }
    const key = this.key(rt, namespace, name);
    if (rt.storageKey === '/namespaces') {
      // Like Kubernetes: the namespace turns Terminating, its contents go, then it goes.
      const terminating = structuredClone(existing);
      terminating.metadata.deletionTimestamp = now();
      terminating.status = { ...(isRecord(existing.status) ? existing.status : {}), phase: 'Terminating' };
      this.store.write(rt.storageKey, terminating);
      for (const resource of this.store.resources()) {
        for (const obj of this.store.list(resource)) {
          if (obj.metadata.namespace === name) this.store.remove(resource, objectKey(obj.metadata));
        }
      }
    }
    if (rt.storageKey === crdStorageKey) {
      // Deleting a CRD deletes every custom object of it.
      const gone = typesFromCrd(existing)[0]?.storageKey;
      if (gone) for (const obj of this.store.list(gone)) this.store.remove(gone, objectKey(obj.metadata));
    }
    return this.store.remove(rt.storageKey, key)!;
  }

  deleteCollection(rt: ResourceType, namespace: string | undefined, sel: Selection): KObject[] {
    return this.list(rt, namespace, sel).map((o) => this.delete(rt, o.metadata.namespace, o.metadata.name!));
  }

  private prepareForCreate(rt: ResourceType, obj: KObject): void {
    const spec = isRecord(obj.spec) ? obj.spec : undefined;
    switch (rt.storageKey) {
      case '/namespaces':
        obj.metadata.labels = { ...obj.metadata.labels, 'kubernetes.io/metadata.name': obj.metadata.name! };
        obj.spec = { finalizers: ['kubernetes'] };
        obj.status = { phase: 'Active' };
        return;
      case '/pods': {
        const containers = spec?.containers;
        if (!Array.isArray(containers) || containers.length === 0 || containers.some((c) => !isRecord(c) || typeof c.name !== 'string' || c.name === '')) {
          throw invalid(rt, obj.metadata.name!, 'spec.containers', 'Required value: at least one container, each with a name');
        }
        spec!.serviceAccountName ??= 'default';
        spec!.serviceAccount = spec!.serviceAccountName;
        for (const c of containers) for (const p of Array.isArray(c.ports) ? c.ports : []) if (isRecord(p)) p.protocol ??= 'TCP';
        obj.status = { phase: 'Pending' };
        return;
      }
      case '/services':
        this.defaultService(rt, obj, undefined);
        obj.status = { loadBalancer: {} };
        return;
      case crdStorageKey: {
        assertValidCrd(rt, obj);
        const s = obj.spec as { names: unknown; versions: Array<{ name: string; storage?: boolean }> };
        obj.status = {
          conditions: [
            { type: 'NamesAccepted', status: 'True', reason: 'NoConflicts', message: 'no conflicts found', lastTransitionTime: now() },
            { type: 'Established', status: 'True', reason: 'InitialNamesAccepted', message: 'the initial names have been accepted', lastTransitionTime: now() },
          ],
          acceptedNames: s.names,
          storedVersions: [(s.versions.find((v) => v.storage) ?? s.versions[0]!).name],
        };
        return;
      }
      case APISERVICE_STORAGE_KEY:
        assertValidApiService(rt, obj);
        delete obj.status; // the aggregator's availability check writes it
        return;
      default:
        if (rt.statusSubresource && rt.group !== '') delete obj.status;
    }
  }

  private prepareForUpdate(rt: ResourceType, next: KObject, existing: KObject): void {
    switch (rt.storageKey) {
      case '/namespaces':
        next.metadata.labels = { ...next.metadata.labels, 'kubernetes.io/metadata.name': next.metadata.name! };
        next.spec = existing.spec;
        return;
      case '/services':
        this.defaultService(rt, next, existing);
        return;
      case crdStorageKey:
        assertValidCrd(rt, next);
        return;
      case APISERVICE_STORAGE_KEY:
        assertValidApiService(rt, next);
    }
  }

  /** Service defaults and ClusterIP allocation; the ClusterIP is immutable once set. */
  private defaultService(rt: ResourceType, obj: KObject, existing: KObject | undefined): void {
    const spec = (isRecord(obj.spec) ? obj.spec : (obj.spec = {})) as Record<string, unknown>;
    const name = obj.metadata.name!;
    spec.type ??= 'ClusterIP';
    spec.sessionAffinity ??= 'None';
    for (const p of Array.isArray(spec.ports) ? spec.ports : []) {
      if (!isRecord(p)) continue;
      p.protocol ??= 'TCP';
      p.targetPort ??= p.port;
    }
    if (spec.type === 'ExternalName') return;
    spec.internalTrafficPolicy ??= 'Cluster';
    const oldSpec = existing && isRecord(existing.spec) ? existing.spec : undefined;
    const requestedList = Array.isArray(spec.clusterIPs) ? spec.clusterIPs.filter((ip): ip is string => typeof ip === 'string' && ip !== '') : [];
    const requested = typeof spec.clusterIP === 'string' && spec.clusterIP !== '' ? [spec.clusterIP, ...requestedList.slice(1)] : requestedList;
    if (oldSpec && typeof oldSpec.clusterIP === 'string') {
      const oldIPs = Array.isArray(oldSpec.clusterIPs) ? (oldSpec.clusterIPs as string[]) : [oldSpec.clusterIP];
      if (requested.length && requested.some((ip, i) => ip !== oldIPs[i])) {
        throw invalid(rt, name, 'spec.clusterIPs', `Invalid value: ${JSON.stringify(requested)}: may not change once set`);
      }
      spec.clusterIP = oldSpec.clusterIP;
      spec.clusterIPs = oldIPs;
      spec.ipFamilies = oldSpec.ipFamilies ?? spec.ipFamilies;
      spec.ipFamilyPolicy = oldSpec.ipFamilyPolicy ?? spec.ipFamilyPolicy;
      return;
    }
    if (requested[0] === 'None') {
      spec.clusterIP = 'None';
      spec.clusterIPs = ['None'];
      if (spec.ipFamilies === undefined) {
        spec.ipFamilies = [this.serviceRanges[0]!.family];
        spec.ipFamilyPolicy ??= 'SingleStack';
      }
      return;
    }
    const policy = spec.ipFamilyPolicy ?? 'SingleStack';
    if (policy !== 'SingleStack' && policy !== 'PreferDualStack' && policy !== 'RequireDualStack') {
      throw invalid(rt, name, 'spec.ipFamilyPolicy', `Unsupported value: ${JSON.stringify(policy)}: supported values: "PreferDualStack", "RequireDualStack", "SingleStack"`);
    }
    const configured = this.serviceRanges.map((r) => r.family);
    let families: IpFamilyName[];
    if (Array.isArray(spec.ipFamilies) && spec.ipFamilies.length) {
      families = spec.ipFamilies as IpFamilyName[];
      families.forEach((f, i) => {
        if (f !== 'IPv4' && f !== 'IPv6') throw invalid(rt, name, `spec.ipFamilies[${i}]`, `Unsupported value: ${JSON.stringify(f)}: supported values: "IPv4", "IPv6"`);
        if (!configured.includes(f)) throw invalid(rt, name, `spec.ipFamilies[${i}]`, `Invalid value: "${f}": not configured on this cluster`);
      });
      if (families.length > 2 || new Set(families).size !== families.length) throw invalid(rt, name, 'spec.ipFamilies', `Invalid value: ${JSON.stringify(families)}: at most one of each family`);
    } else if (requested.length) {
      families = requested.map((ip, i) => {
        const p = parseIp(ip);
        if (!p) throw invalid(rt, name, `spec.clusterIPs[${i}]`, `Invalid value: "${ip}": must be a valid IP address`);
        return familyName(p.family);
      });
    } else {
      families = [configured[0]!];
    }
    if (policy === 'SingleStack' && families.length > 1) throw invalid(rt, name, 'spec.ipFamilyPolicy', 'Invalid value: "SingleStack": must be dual-stack for 2 IP families');
    if (policy === 'RequireDualStack' && configured.length < 2) throw invalid(rt, name, 'spec.ipFamilyPolicy', 'Invalid value: "RequireDualStack": this cluster is not configured for dual-stack Services');
    if (policy !== 'SingleStack' && families.length === 1 && configured.length === 2) families = [families[0]!, configured.find((f) => f !== families[0])!];
    const used = this.allocatedClusterIPs();
    const ips = families.map((family, i) => {
      const range = this.serviceRanges.find((r) => r.family === family)!;
      const want = requested[i];
      if (want === undefined) return this.allocateClusterIP(range, used);
      const ip = canonicalIp(want, family);
      const v = ip === undefined ? undefined : parseIp(ip)!.value;
      if (v === undefined || v <= range.base || v >= range.base + range.size - 1n) {
        throw invalid(rt, name, 'spec.clusterIPs', `Invalid value: "${want}": provided IP is not in the valid range; the range of valid IPs is ${range.cidr}`);
      }
      if (used.has(ip!)) throw invalid(rt, name, 'spec.clusterIPs', `Invalid value: "${want}": provided IP is already allocated`);
      used.add(ip!);
      return ip!;
    });
    spec.clusterIP = ips[0];
    spec.clusterIPs = ips;
    spec.ipFamilies = families;
    spec.ipFamilyPolicy = policy;
  }

  private allocatedClusterIPs(): Set<string> {
    return new Set(this.store.list('/services').flatMap((s) => {
      if (!isRecord(s.spec)) return [];
      const ips = Array.isArray(s.spec.clusterIPs) ? s.spec.clusterIPs : [s.spec.clusterIP];
      return ips.filter((ip): ip is string => typeof ip === 'string');
    }));
  }

  /** The lowest free address of `range` (also marked used in `used`). */
  private allocateClusterIP(range: ServiceRange, used: Set<string>): string {
    const family = range.family === 'IPv4' ? 4 : 6;
    // The range's first address after the network address is the kubernetes Service's in a real cluster; start after it.
    for (let n = range.base + 2n; n < range.base + range.size - 1n; n++) {
      const ip = formatIp(family, n);
      if (!used.has(ip)) {
        used.add(ip);
        return ip;
      }
    }
    throw new ApiError(500, 'InternalError', `failed to allocate a serviceIP: the range ${range.cidr} is full`);
  }
}
