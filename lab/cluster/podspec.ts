/**
 * A DaemonSet Pod's spec → what `podman run` does for each of its containers on a lab node (pure).
 *
 * A lab node is a network namespace, not a machine: its "host" filesystem is the real host's with
 * node-private directories in place of the paths a node agent owns. hostPath volumes are mapped
 * accordingly (NodeDirs: the node's CNI configuration and the lab's CNI bin directory, the node's
 * OVS run directory, a node root for sluice's run/state/log directories, the host's /proc,
 * /lib/modules, /run/netns and xtables lock). configMap volumes become files in the Pod's directory,
 * the ServiceAccount token is mounted where in-cluster clients read it, and the downward-API
 * environment is filled in. Whatever the lab cannot honour is refused with a PodSpecError naming
 * the field: a Pod never runs with part of its spec silently dropped.
 */
import { join, posix } from 'node:path';
import type { KubeObject } from '../../daemon/policy/types.js';
import { SERVICE_ACCOUNT_DIR } from '../../daemon/kube/access.js';

export class PodSpecError extends Error {
  override name = 'PodSpecError';
}

/** An object the Pod refers to does not exist (yet): a kubelet waits for it and tries again. */
export class PodInputMissing extends Error {
  override name = 'PodInputMissing';
}

/** Where a Pod's service account token and CA are mounted (the agent reads them from there). */
export { SERVICE_ACCOUNT_DIR };

/** Where a node's host paths live, and what a Pod on it sees of the cluster. */
export interface NodeDirs {
  lab: string;
  node: string;
  /** Host path of the node's network namespace (/run/netns/<lab>-node-<i>). */
  netnsPath: string;
  hostIP: string;
  /** The node's CNI configuration directory: the node's /etc/cni/net.d. */
  cniConfDir: string;
  /** The directory the node's CNI runner takes plugins from: the node's /opt/cni/bin. */
  cniBinDir: string;
  /** The node's Open vSwitch run directory: the node's /var/run/openvswitch. */
  ovsRunDir: string;
  /** The node's container runtime CNI result cache: the node's /var/lib/cni (what the agent adopts running Pods from). */
  cniCacheDir: string;
  /** Node-private root for the other paths a node agent owns (/var/run/sluice, /var/lib/..., /var/log/..., /etc/...). */
  nodeRoot: string;
  /** This Pod's own directory (configMap files, ServiceAccount token). */
  podDir: string;
  /** KUBERNETES_SERVICE_HOST / _PORT inside the node (HTTPS, verified with caCert). */
  apiHost: string;
  apiPort: number;
}

/** The cluster objects a Pod's volumes and environment refer to. */
export interface PodInputs {
  configMaps: (namespace: string, name: string) => Record<string, string> | undefined;
  serviceAccountToken: (namespace: string, name: string) => string;
  caCert: string;
}

export interface FileToWrite {
  path: string;
  content: string;
  mode: number;
}

export interface ContainerRun {
  name: string;
  /** The Pod's container name (spec.containers[].name). */
  container: string;
  init: boolean;
  image: string;
  /** `podman run` arguments after `run` (the caller adds global options such as --runtime). */
  args: string[];
}

export interface PodRunPlan {
  /** Host directories to create before starting (hostPath DirectoryOrCreate, the Pod directory). */
  dirs: string[];
  /** Host files to create empty when absent (hostPath FileOrCreate). */
  touch: string[];
  /** Host paths that must already exist (hostPath Directory / File). */
  mustExist: string[];
  /**
   * hostPath without a type: no check, and a missing path is created as a directory when the
   * container starts (containerd and Docker do so for a bind mount's missing source).
   */
  dirsIfMissing: string[];
  /** configMap volume files and the ServiceAccount token files. */
  files: FileToWrite[];
  initContainers: ContainerRun[];
  containers: ContainerRun[];
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Host paths a node shares with the machine: mounted as they are. */
const SHARED_HOST_PATHS = ['/proc', '/lib/modules', '/run/netns', '/run/xtables.lock', '/sys'];
/** Prefixes of paths that are node-private: mapped under NodeDirs.nodeRoot. */
const NODE_PRIVATE_PREFIXES = ['/run/sluice', '/var/lib', '/var/log', '/etc/iproute2', '/etc/sluice'];

/** /var/run is /run on every current distribution; the lab keeps one spelling. */
const canonical = (p: string): string => {
  const n = posix.normalize(p).replace(/\/+$/, '') || '/';
  return n === '/var/run' || n.startsWith('/var/run/') ? n.slice(4) : n;
};
const under = (p: string, prefix: string): boolean => p === prefix || p.startsWith(`${prefix}/`);

/** The lab path standing for host path `path` on this node; a PodSpecError when there is none. */
export function nodeHostPath(dirs: NodeDirs, path: string, field: string): string {
  if (!path.startsWith('/')) throw new PodSpecError(`${field}: "${path}" is not an absolute path`);
  const p = canonical(path);
  const special: [string, string][] = [
    ['/etc/cni/net.d', dirs.cniConfDir],
    ['/opt/cni/bin', dirs.cniBinDir],
    ['/run/openvswitch', dirs.ovsRunDir],
    ['/var/lib/cni', dirs.cniCacheDir],
  ];
  for (const [prefix, target] of special) if (under(p, prefix)) return join(target, p.slice(prefix.length));
  if (SHARED_HOST_PATHS.some((s) => under(p, s))) return p;
  if (NODE_PRIVATE_PREFIXES.some((s) => under(p, s))) return join(dirs.nodeRoot, p);
  throw new PodSpecError(
    `${field}: hostPath "${path}" has no place on a lab node (mapped: /etc/cni/net.d, /opt/cni/bin, /var/run/openvswitch, /var/lib/cni; ` +
      `node-private: ${NODE_PRIVATE_PREFIXES.join(', ')}; shared with the host: ${SHARED_HOST_PATHS.join(', ')})`,
  );
}

/** containerd's normalisation: a name without a registry host is on docker.io (library/ when it has no slash). */
export function normalizeImage(image: string): string {
  const first = image.split('/')[0]!;
  const hasHost = image.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost');
  if (hasHost) return image;
  const withRepo = image.includes('/') ? image : `library/${image}`;
  return `docker.io/${withRepo}${/[:@]/.test(image.split('/').pop()!) ? '' : ':latest'}`;
}

/** A podman container name for one of a Pod's containers: the lab, the Pod's uid and the container. */
export const podmanName = (lab: string, podUid: string, container: string): string => `${lab}-${podUid.slice(0, 8)}-${container}`;

/** Pod spec fields with no effect on how its containers run here (scheduling, images, DNS of a host-network Pod). */
const POD_FIELDS_ACCEPTED = new Set([
  'containers', 'initContainers', 'volumes', 'hostNetwork', 'nodeName', 'serviceAccountName', 'serviceAccount',
  'automountServiceAccountToken', 'priorityClassName', 'priority', 'tolerations', 'nodeSelector', 'affinity',
  'restartPolicy', 'terminationGracePeriodSeconds', 'dnsPolicy', 'schedulerName', 'enableServiceLinks',
  'preemptionPolicy', 'securityContext', 'hostPID',
]);
const CONTAINER_FIELDS_ACCEPTED = new Set([
  'name', 'image', 'command', 'args', 'env', 'ports', 'securityContext', 'resources', 'readinessProbe', 'livenessProbe',
  'volumeMounts', 'imagePullPolicy', 'terminationMessagePath', 'terminationMessagePolicy', 'workingDir',
]);

/** Every reason this lab cannot run the Pod as specified, each naming its field; empty when it can. */
export function podSpecProblems(pod: KubeObject): string[] {
  const spec = (pod.spec ?? {}) as Obj;
  const problems: string[] = [];
  for (const key of Object.keys(spec)) if (!POD_FIELDS_ACCEPTED.has(key)) problems.push(`spec.${key} is not supported by the lab's podman kubelet`);
  if (spec.hostNetwork !== true) problems.push('spec.hostNetwork must be true: the lab runs image Pods only in a node\'s network namespace (workload Pods have no image)');
  if (isObj(spec.securityContext) && Object.keys(spec.securityContext).length) problems.push('spec.securityContext is not supported (set it per container)');
  if (spec.restartPolicy !== undefined && spec.restartPolicy !== 'Always') problems.push(`spec.restartPolicy "${String(spec.restartPolicy)}": only Always is supported`);
  const all = [...((spec.initContainers ?? []) as Obj[]).map((c, i) => [c, `spec.initContainers[${i}]`] as const), ...((spec.containers ?? []) as Obj[]).map((c, i) => [c, `spec.containers[${i}]`] as const)];
  if (!Array.isArray(spec.containers) || spec.containers.length === 0) problems.push('spec.containers must list at least one container');
  for (const [c, at] of all) {
    for (const key of Object.keys(c)) if (!CONTAINER_FIELDS_ACCEPTED.has(key)) problems.push(`${at}.${key} is not supported by the lab's podman kubelet`);
    if (typeof c.image !== 'string' || c.image === '') problems.push(`${at}.image is required`);
    if (c.imagePullPolicy === 'Always') problems.push(`${at}.imagePullPolicy Always: the lab has no registry; images must be local (IfNotPresent or Never)`);
    for (const [j, p] of ((c.ports ?? []) as Obj[]).entries()) {
      if (p.hostPort !== undefined && p.hostPort !== p.containerPort) problems.push(`${at}.ports[${j}].hostPort ${String(p.hostPort)}: with hostNetwork it must equal containerPort`);
      if (p.hostIP !== undefined) problems.push(`${at}.ports[${j}].hostIP is not supported`);
    }
    const sc = (c.securityContext ?? {}) as Obj;
    for (const key of Object.keys(sc)) if (key !== 'privileged') problems.push(`${at}.securityContext.${key} is not supported (only privileged)`);
    const limits = isObj(c.resources) ? (c.resources as Obj).limits : undefined;
    if (isObj(limits) && Object.keys(limits).length) problems.push(`${at}.resources.limits are not enforced by the lab (requests are accepted: they only schedule)`);
    for (const probe of ['readinessProbe', 'livenessProbe']) {
      const pr = c[probe];
      if (pr !== undefined && !(isObj(pr) && isObj(pr.httpGet))) problems.push(`${at}.${probe}: only httpGet probes are supported`);
      else if (isObj(pr) && isObj(pr.httpGet) && pr.httpGet.scheme !== undefined && pr.httpGet.scheme !== 'HTTP' && pr.httpGet.scheme !== 'HTTPS') problems.push(`${at}.${probe}.httpGet.scheme ${String(pr.httpGet.scheme)}: not HTTP or HTTPS`);
      else if (isObj(pr) && isObj(pr.httpGet) && pr.httpGet.httpHeaders !== undefined) problems.push(`${at}.${probe}.httpGet.httpHeaders is not supported`);
    }
    for (const [j, m] of ((c.volumeMounts ?? []) as Obj[]).entries()) {
      if (m.subPath !== undefined || m.subPathExpr !== undefined) problems.push(`${at}.volumeMounts[${j}].subPath is not supported`);
      if (m.mountPropagation !== undefined && !['None', 'HostToContainer', 'Bidirectional'].includes(String(m.mountPropagation))) {
        problems.push(`${at}.volumeMounts[${j}].mountPropagation "${String(m.mountPropagation)}" is not a Kubernetes value`);
      }
    }
    for (const [j, e] of ((c.env ?? []) as Obj[]).entries()) {
      if (isObj(e.valueFrom) && !isObj(e.valueFrom.fieldRef) && !isObj(e.valueFrom.configMapKeyRef)) {
        problems.push(`${at}.env[${j}] (${String(e.name)}).valueFrom: only fieldRef and configMapKeyRef are supported`);
      }
    }
  }
  for (const [i, v] of ((spec.volumes ?? []) as Obj[]).entries()) {
    const types = Object.keys(v).filter((k) => k !== 'name');
    if (types.length !== 1 || !['hostPath', 'configMap', 'emptyDir'].includes(types[0]!)) {
      problems.push(`spec.volumes[${i}] (${String(v.name)}): volume type ${types.join('+') || '(none)'} is not supported (hostPath, configMap, emptyDir)`);
    }
    if (isObj(v.configMap) && v.configMap.items !== undefined) problems.push(`spec.volumes[${i}] (${String(v.name)}).configMap.items is not supported (the whole ConfigMap is mounted)`);
  }
  return problems;
}

/** The value of a downward-API fieldRef for this Pod on this node. */
function fieldRefValue(pod: KubeObject, dirs: NodeDirs, fieldPath: string, at: string): string {
  switch (fieldPath) {
    case 'spec.nodeName': return dirs.node;
    case 'metadata.name': return pod.metadata.name;
    case 'metadata.namespace': return pod.metadata.namespace ?? 'default';
    case 'metadata.uid': return String(pod.metadata.uid ?? '');
    case 'spec.serviceAccountName': return String(pod.spec?.serviceAccountName ?? 'default');
    // A host-network Pod's IP is its node's.
    case 'status.hostIP': case 'status.podIP': return dirs.hostIP;
    default: throw new PodSpecError(`${at}.valueFrom.fieldRef.fieldPath "${fieldPath}" is not supported`);
  }
}

/**
 * The whole plan for a Pod on a node: host directories and files to prepare, and the podman run
 * arguments of its init containers (in order) and containers. Throws PodSpecError listing every
 * problem when the Pod cannot be run as specified.
 */
export function planPodRun(pod: KubeObject, dirs: NodeDirs, inputs: PodInputs): PodRunPlan {
  const problems = podSpecProblems(pod);
  if (problems.length) throw new PodSpecError(`Pod ${pod.metadata.namespace}/${pod.metadata.name}: ${problems.join('; ')}`);
  const spec = pod.spec as Obj;
  const namespace = pod.metadata.namespace ?? 'default';
  const uid = String(pod.metadata.uid ?? '');
  if (!uid) throw new PodSpecError(`Pod ${namespace}/${pod.metadata.name}: metadata.uid is missing`);
  const plan: PodRunPlan = { dirs: [dirs.podDir], touch: [], mustExist: [], dirsIfMissing: [], files: [], initContainers: [], containers: [] };

  // Volumes → host paths.
  const volumeHost = new Map<string, string>();
  for (const [i, v] of ((spec.volumes ?? []) as Obj[]).entries()) {
    const name = String(v.name);
    const at = `spec.volumes[${i}] (${name})`;
    if (isObj(v.hostPath)) {
      const host = nodeHostPath(dirs, String(v.hostPath.path ?? ''), `${at}.hostPath.path`);
      const type = String(v.hostPath.type ?? '');
      if (type === 'DirectoryOrCreate') plan.dirs.push(host);
      else if (type === 'FileOrCreate') plan.touch.push(host);
      else if (type === 'Directory' || type === 'File') plan.mustExist.push(host);
      else if (type === '') plan.dirsIfMissing.push(host);
      else throw new PodSpecError(`${at}.hostPath.type "${type}" is not supported (DirectoryOrCreate, Directory, FileOrCreate, File)`);
      volumeHost.set(name, host);
    } else if (isObj(v.configMap)) {
      const cmName = String(v.configMap.name ?? '');
      const data = inputs.configMaps(namespace, cmName);
      if (!data) {
        if (v.configMap.optional === true) {
          plan.dirs.push(join(dirs.podDir, 'volumes', name));
          volumeHost.set(name, join(dirs.podDir, 'volumes', name));
          continue;
        }
        throw new PodInputMissing(`${at}.configMap: ConfigMap ${namespace}/${cmName} not found`);
      }
      const dir = join(dirs.podDir, 'volumes', name);
      plan.dirs.push(dir);
      for (const [key, content] of Object.entries(data).sort()) plan.files.push({ path: join(dir, key), content, mode: Number(v.configMap.defaultMode ?? 0o644) });
      volumeHost.set(name, dir);
    } else {
      const dir = join(dirs.podDir, 'volumes', name);
      plan.dirs.push(dir);
      volumeHost.set(name, dir);
    }
  }

  // The ServiceAccount's token, the cluster CA and the namespace, as a kubelet projects them.
  const sa = String(spec.serviceAccountName ?? 'default');
  const saDir = join(dirs.podDir, 'serviceaccount');
  const mountToken = spec.automountServiceAccountToken !== false;
  if (mountToken) {
    plan.dirs.push(saDir);
    plan.files.push(
      { path: join(saDir, 'token'), content: inputs.serviceAccountToken(namespace, sa), mode: 0o600 },
      { path: join(saDir, 'ca.crt'), content: inputs.caCert, mode: 0o644 },
      { path: join(saDir, 'namespace'), content: namespace, mode: 0o644 },
    );
  }

  const run = (c: Obj, at: string, init: boolean): ContainerRun => {
    const cname = String(c.name);
    const args = [
      '--name', podmanName(dirs.lab, uid, cname),
      '--label', `io.sluice.lab=${dirs.lab}`, '--label', `io.kubernetes.pod.uid=${uid}`,
      '--label', `io.kubernetes.pod.namespace=${namespace}`, '--label', `io.kubernetes.pod.name=${pod.metadata.name}`,
      '--label', `io.kubernetes.container.name=${cname}`,
      '--pull', 'never',
      '--network', `ns:${dirs.netnsPath}`,
      // The kubelet restarts containers; podman does not.
      '--restart', 'no',
    ];
    if (spec.hostPID === true) args.push('--pid', 'host');
    if ((c.securityContext as Obj | undefined)?.privileged === true) args.push('--privileged');
    if (typeof c.workingDir === 'string') args.push('--workdir', c.workingDir);
    const env: [string, string][] = [
      ['KUBERNETES_SERVICE_HOST', dirs.apiHost], ['KUBERNETES_SERVICE_PORT', String(dirs.apiPort)],
      ['KUBERNETES_SERVICE_PORT_HTTPS', String(dirs.apiPort)],
    ];
    for (const [j, e] of ((c.env ?? []) as Obj[]).entries()) {
      const eAt = `${at}.env[${j}] (${String(e.name)})`;
      if (isObj(e.valueFrom) && isObj(e.valueFrom.fieldRef)) {
        env.push([String(e.name), fieldRefValue(pod, dirs, String(e.valueFrom.fieldRef.fieldPath), eAt)]);
      } else if (isObj(e.valueFrom) && isObj(e.valueFrom.configMapKeyRef)) {
        const ref = e.valueFrom.configMapKeyRef;
        const value = inputs.configMaps(namespace, String(ref.name))?.[String(ref.key)];
        if (value === undefined && ref.optional !== true) throw new PodInputMissing(`${eAt}.valueFrom.configMapKeyRef: ${namespace}/${String(ref.name)} has no key ${String(ref.key)}`);
        if (value !== undefined) env.push([String(e.name), value]);
      } else {
        env.push([String(e.name), String(e.value ?? '')]);
      }
    }
    for (const [k, v] of env) args.push('--env', `${k}=${v}`);
    for (const [j, m] of ((c.volumeMounts ?? []) as Obj[]).entries()) {
      const host = volumeHost.get(String(m.name));
      if (!host) throw new PodSpecError(`${at}.volumeMounts[${j}].name "${String(m.name)}" is not one of spec.volumes`);
      const opts = [m.readOnly === true ? 'ro' : 'rw'];
      if (m.mountPropagation === 'HostToContainer') opts.push('rslave');
      if (m.mountPropagation === 'Bidirectional') opts.push('rshared');
      args.push('--volume', `${host}:${String(m.mountPath)}:${opts.join(',')}`);
    }
    if (mountToken) args.push('--volume', `${saDir}:${SERVICE_ACCOUNT_DIR}:ro`);
    const image = normalizeImage(String(c.image));
    const command = Array.isArray(c.command) ? c.command.map(String) : undefined;
    if (command) args.push('--entrypoint', JSON.stringify(command));
    args.push(image, ...(Array.isArray(c.args) ? c.args.map(String) : []));
    return { name: podmanName(dirs.lab, uid, cname), container: cname, init, image, args };
  };
  plan.initContainers = ((spec.initContainers ?? []) as Obj[]).map((c, i) => run(c, `spec.initContainers[${i}]`, true));
  plan.containers = ((spec.containers ?? []) as Obj[]).map((c, i) => run(c, `spec.containers[${i}]`, false));
  return plan;
}
