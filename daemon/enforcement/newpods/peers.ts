/**
 * The question one agent asks another about a new Pod: "is Pod ns/name enforced on your bridge with
 * these addresses as its own?", over HTTP on the node network (the agent's realization endpoint,
 * `realizationPort` on the Node's addresses). The answer may wait: the asker gives how long
 * (`waitMs`, a long poll), and the answer comes as soon as it is yes, or with no at the end.
 *
 *   GET /realized?pod=<ns>/<name>&ips=<a>,<b>&waitMs=<ms>[&versions=<view versions>]  ->  200 {"realized": true|false}
 *
 * `versions` (controller mode, VIEW_VERSIONS_ANNOTATION's form): the versions of the asked Node's
 * view that hold the Pod, as the controller told the asker; that Node says yes once it enforces its
 * view as of them.
 *   400 {"error": ...} names what is wrong with a question.
 */
import { canonicalIp } from '../../policy/cidr.js';
import { agentUrl, getAgentJson } from '../agent-http.js';
import { formatViewVersions, parseViewVersions, type ViewVersions } from '../../controlplane/types.js';

export interface PodQuestion {
  namespace: string;
  name: string;
  /** Canonical addresses, at least one. */
  ips: string[];
}

/** The longest an answer may be held back. */
export const MAX_WAIT_MS = 30_000;

/** A question from its query, or the reason it is not one. */
export function parseQuestion(q: URLSearchParams): { question: PodQuestion; waitMs: number; versions?: ViewVersions } | { error: string } {
  const pod = q.get('pod') ?? '';
  const slash = pod.indexOf('/');
  if (slash <= 0 || slash === pod.length - 1 || pod.indexOf('/', slash + 1) >= 0) return { error: `pod "${pod}": use <namespace>/<name>` };
  const raw = (q.get('ips') ?? '').split(',').filter((s) => s !== '');
  if (raw.length === 0) return { error: 'ips: at least one address is needed' };
  const ips: string[] = [];
  for (const r of raw) {
    const ip = canonicalIp(r);
    if (ip === undefined) return { error: `ips: "${r}" is not an IP address` };
    ips.push(ip);
  }
  const w = q.get('waitMs') ?? '0';
  const waitMs = Number(w);
  if (!/^\d+$/.test(w) || waitMs > MAX_WAIT_MS) return { error: `waitMs "${w}": use 0-${MAX_WAIT_MS}` };
  const question = { namespace: pod.slice(0, slash), name: pod.slice(slash + 1), ips };
  const v = q.get('versions');
  if (v === null) return { question, waitMs };
  const versions = parseViewVersions(v);
  if (!versions) return { error: `versions "${v}": use NetworkPolicy=<rv>,AppliedToGroup=<rv>,AddressGroup=<rv>` };
  return { question, waitMs, versions };
}

export function questionPath(p: PodQuestion, waitMs: number, versions?: ViewVersions): string {
  const q = new URLSearchParams({ pod: `${p.namespace}/${p.name}`, ips: p.ips.join(','), waitMs: String(Math.max(0, Math.min(MAX_WAIT_MS, Math.round(waitMs)))) });
  if (versions) q.set('versions', formatViewVersions(versions));
  return `/realized?${q}`;
}

/**
 * The most questions one agent has open at once, to every peer together. A cluster that starts
 * all at once has each new Pod's agent ask thousands of Nodes (those the controller has no report
 * from yet), for each of its Pods: at 150 000 Pods and 5 000 Nodes (bench/scale-lab) ~80 000
 * questions per agent within two minutes. Each open one is a socket and a request, and all at once
 * they took an agent's heap past 700 MiB and left its malloc heap fragmented after. Beyond this,
 * questions wait their turn; one whose time runs out first is answered no without being asked
 * (the Pod stays guarded from that Node: fail closed).
 */
export const MAX_OPEN_QUESTIONS = 512;

/**
 * First-come slots for open questions. `run` calls `ask` with the time left once a slot is free,
 * or resolves `expired` if `deadline` passes first (`ask` is then never called).
 */
export class QuestionSlots {
  private open = 0;
  private readonly waiting: { start: () => void; timer: NodeJS.Timeout }[] = [];

  constructor(readonly limit: number) {}

  async run<T>(deadline: number, ask: (leftMs: number) => Promise<T>, expired: T): Promise<T> {
    if (this.open < this.limit) this.open++;
    else {
      const got = await new Promise<boolean>((resolve) => {
        const w = {
          start: () => {
            clearTimeout(w.timer);
            resolve(true);
          },
          timer: setTimeout(() => {
            this.waiting.splice(this.waiting.indexOf(w), 1);
            resolve(false);
          }, Math.max(0, deadline - Date.now())),
        };
        this.waiting.push(w);
      });
      if (!got) return expired;
    }
    try {
      return await ask(Math.max(0, deadline - Date.now()));
    } finally {
      // The slot goes straight to the next waiting question.
      const next = this.waiting.shift();
      if (next) next.start();
      else this.open--;
    }
  }

  status(): { open: number; waiting: number } {
    return { open: this.open, waiting: this.waiting.length };
  }
}

/** This agent's slots: every question to a peer takes one. */
export const questionSlots = new QuestionSlots(MAX_OPEN_QUESTIONS);

/**
 * Asks the agent at `address` (an IP) and `port`, waiting for a slot (questionSlots) within
 * `waitMs`; true when it answered yes, false when no slot came in time. Every failure (no agent
 * listening, a timeout, a malformed answer) rejects with an error naming the peer: the caller
 * counts it as "not known there".
 */
export async function askPeer(address: string, port: number, p: PodQuestion, waitMs: number, versions?: ViewVersions): Promise<boolean> {
  return questionSlots.run(Date.now() + waitMs, async (left) => {
    const v = (await getAgentJson(agentUrl(address, port, questionPath(p, left, versions)), left + 5000)) as { realized?: unknown } | null;
    if (typeof v?.realized !== 'boolean') throw new Error(`${address}:${port}: not an answer: no "realized"`);
    return v.realized;
  }, false);
}
