/**
 * A new Pod's first packets in controller mode. The agent holds no cluster view, so the controller
 * says where the Pod matters; the question is asked once, of the controller, and the nodes it names
 * are then asked whether they hold it:
 *
 * 1. publish the Pod's addresses (its status condition: the controller learns them from it);
 * 2. ask the controller (`/realization`, a long poll) which Nodes need the Pod and at which
 *    versions of their views they hold it — the Pod's own Node (its own policies, through its
 *    AppliedToGroups) and the Nodes whose rules name it as a peer. The controller waits, for up to
 *    CONFIRM_SHARE of the time left, until each of those Nodes' agents has reported that its
 *    bridge enforces those versions (they report every commit to it: one line per Node and
 *    commit, however many Pods start), and marks the ones that have `confirmed`;
 * 3. wait until this Node enforces its own view as of its versions (the Pod's own rules are on the
 *    bridge), then ask the Nodes not confirmed the same, directly, with their versions, in the
 *    time left, one question open per Node shared by every Pod waiting on it (peer-questions.ts).
 *    The nodes that do not confirm in time are guarded from (newpods/gate.ts), their span Pods'
 *    addresses given by the controller, and asked again in the background.
 *
 * When the controller does not answer, or this Node does not receive the Pod's own state in time,
 * nothing is known of the Pod's policies here: every new connection of the Pod is dropped, both
 * ways, until the answer comes and is enforced (fail closed; the Pod starts, isolated). The
 * background follow-up asks again (long polls, backoff when the controller cannot be reached).
 */
import { type Clock, Pauses } from '../../clock.js';
import { type PodRealization, type ViewVersions, viewVersionsOf } from '../../controlplane/types.js';
import type { GuardedPod } from '../../flows/newpod-guard.js';
import { NewPodGate, type PodQuestion } from '../newpods/index.js';
import { PeerQuestions } from './peer-questions.js';

/**
 * The share of a new Pod's time the controller may wait for the span's reports: the rest is for
 * this Node's own state and a last direct question to the Nodes still not confirmed.
 */
export const CONFIRM_SHARE = 0.75;

export interface ControlledPodAdmissionDeps {
  nodeName: string;
  clock: Clock;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void };
  confirmWithinMs: number;
  /** Long poll length of the background follow-up (default 30 s). */
  backgroundWaitMs?: number;
  publish(pod: PodQuestion): Promise<void>;
  /**
   * The controller's answer (undefined: it does not hold the Pod at these addresses within
   * `waitMs`), waiting up to `confirmMs` for the span's reports; rejects when it cannot be asked.
   */
  askController(pod: PodQuestion, waitMs: number, confirmMs: number): Promise<PodRealization | undefined>;
  /** Resolves true once this Node enforces its view as of `v`, false after `waitMs`. */
  whenLocalRealized(v: ViewVersions, waitMs: number): Promise<boolean>;
  askPeer(address: string, pod: PodQuestion, waitMs: number, versions: ViewVersions): Promise<boolean>;
  applyFlows(): Promise<unknown>;
}

export interface ControlledAdmitOutcome {
  /** Nodes the controller named (this one included). */
  span: string[];
  /** Of those, the Nodes the controller confirmed (their agents reported the versions enforced): not asked. */
  confirmed: number;
  /** Nodes guarded from ("*": everything, the Pod's own state not enforced here yet). */
  guarded: string[];
  published: boolean;
  ms: number;
}

interface Isolation {
  pod: PodQuestion;
  since: number;
  why: string;
}

const refOf = (p: { namespace: string; name: string }) => `${p.namespace}/${p.name}`;

export class ControlledPodAdmission {
  /**
   * The controller's last answer per local Pod while the Pod is isolated or guarded (the peers'
   * gate reads its span from it); dropped once neither: an answer lists every Node of the span with
   * its Pods' addresses, tens of thousands in a large cluster, and nothing reads it after.
   */
  private readonly answers = new Map<string, PodRealization>();
  /** Each answer's span as the gate reads it (Node → its span Pods' addresses), the confirmed Nodes left out. */
  private readonly spans = new WeakMap<PodRealization, Map<string, string[]>>();
  /** Node → address, from the answers. */
  private readonly addresses = new Map<string, string>();
  private readonly isolated = new Map<string, Isolation>();
  private readonly peers: NewPodGate;
  /** The direct questions to Nodes the controller did not confirm: one open per Node, shared by its waiting Pods. */
  private readonly questions: PeerQuestions;
  /** Pending pauses (asking again), ended by close. */
  private readonly pauses: Pauses;
  private closed = false;
  private readonly counts = { isolated: 0, released: 0, controllerUnanswered: 0, spanNodes: 0, confirmedByController: 0 };

  constructor(private readonly d: ControlledPodAdmissionDeps) {
    this.pauses = new Pauses(d.clock);
    this.questions = new PeerQuestions({ clock: d.clock, askPeer: (address, pod, waitMs, versions) => d.askPeer(address, pod, waitMs, versions) });
    this.peers = new NewPodGate({
      nodeName: d.nodeName,
      span: (namespace, name) => {
        const a = this.answers.get(`${namespace}/${name}`);
        if (!a) return new Map();
        // Built once per answer: the gate reads it for every lagging Node it follows.
        let span = this.spans.get(a);
        // A Node the controller confirmed holds the Pod already: not asked, never guarded from.
        if (!span) this.spans.set(a, (span = new Map(a.nodes.filter((n) => n.name !== d.nodeName && !n.confirmed).map((n) => [n.name, n.podIps]))));
        return span;
      },
      peerAddress: (node) => this.addresses.get(node),
      // Published in step 1, before the controller is asked.
      publish: async () => {},
      ask: (address, pod, waitMs) => {
        const node = this.answers.get(refOf(pod))?.nodes.find((n) => n.address === address);
        const versions = node && viewVersionsOf(node.versions);
        if (!versions) return Promise.resolve(false);
        return this.questions.ask(address, pod, versions, waitMs);
      },
      applyFlows: () => d.applyFlows(),
      clock: d.clock,
      log: d.log,
      confirmWithinMs: d.confirmWithinMs,
      guardEnded: (pod) => this.settled(pod),
    });
  }

  /** The Pod's admission is over if it is neither isolated nor guarded: its answer goes. */
  private settled(pod: PodQuestion): void {
    const ref = refOf(pod);
    if (!this.isolated.has(ref) && !this.peers.guarding(pod.namespace, pod.name)) this.answers.delete(ref);
  }

  /** Steps 1–3; resolves once the Pod may start (its guards, if any, are on the bridge). */
  async admit(pod: PodQuestion): Promise<ControlledAdmitOutcome> {
    const { d } = this;
    const t0 = d.clock.now();
    const ref = refOf(pod);
    let published = true;
    try {
      await d.publish(pod);
    } catch (err) {
      published = false;
      d.log.warn({ pod: ref, err: (err as Error).message }, 'new Pod: its addresses could not be published; the controller learns them from the kubelet');
    }
    const deadline = t0 + d.confirmWithinMs;
    const answer = await this.askControllerUntil(pod, deadline);
    if (!answer) {
      this.counts.controllerUnanswered++;
      await this.isolate(pod, 'the controller did not say where the Pod matters in time');
      return { span: [], confirmed: 0, guarded: ['*'], published, ms: d.clock.now() - t0 };
    }
    this.learn(ref, answer);
    const span = answer.nodes.map((n) => n.name);
    const confirmed = answer.nodes.filter((n) => n.confirmed).length;
    if (!(await this.ownStateIn(answer, Math.max(0, deadline - d.clock.now())))) {
      await this.isolate(pod, 'this node has not received the Pod\'s own policies in time');
      return { span, confirmed, guarded: ['*'], published, ms: d.clock.now() - t0 };
    }
    const out = await this.peers.admit(pod, new Map(), Math.max(0, deadline - d.clock.now()));
    this.settled(pod);
    return { span, confirmed, guarded: out.guarded, published, ms: d.clock.now() - t0 };
  }

  /** The Pod is gone from this node: its guards go with its flows. */
  forget(namespace: string, name: string): void {
    const ref = refOf({ namespace, name });
    this.isolated.delete(ref);
    this.answers.delete(ref);
    this.peers.forget(namespace, name);
  }

  guarded(): GuardedPod[] {
    const out = this.peers.guarded();
    for (const i of this.isolated.values()) out.push({ podIps: i.pod.ips, peerIps: [], all: true });
    return out;
  }

  status(): ReturnType<NewPodGate['status']> & {
    isolatedPods: { pod: string; why: string; sinceMs: number }[];
    isolated: number;
    released: number;
    controllerUnanswered: number;
    /** Nodes named in the controller's answers, and of those, the ones it confirmed (not asked). */
    spanNodes: number;
    confirmedByController: number;
    answersHeld: number;
    /** Questions asked of Nodes directly, and the Pods' waits they answered (several Pods share one). */
    directQuestions: { asked: number; waited: number; open: number };
  } {
    const now = this.d.clock.now();
    return {
      ...this.peers.status(),
      ...this.counts,
      answersHeld: this.answers.size,
      directQuestions: this.questions.status(),
      isolatedPods: [...this.isolated].map(([pod, i]) => ({ pod, why: i.why, sinceMs: now - i.since })),
    };
  }

  close(): void {
    this.closed = true;
    this.peers.close();
    this.questions.close();
    this.pauses.close();
  }

  private learn(ref: string, answer: PodRealization): void {
    this.answers.set(ref, answer);
    this.counts.spanNodes += answer.nodes.length;
    this.counts.confirmedByController += answer.nodes.filter((n) => n.confirmed).length;
    for (const n of answer.nodes) if (n.address) this.addresses.set(n.name, n.address);
  }

  /** This node enforces the Pod's own state (the versions the controller gave for this node); true when none were given. */
  private async ownStateIn(answer: PodRealization, waitMs: number): Promise<boolean> {
    const own = answer.nodes.find((n) => n.name === this.d.nodeName);
    if (!own) return true;
    const v = viewVersionsOf(own.versions);
    if (!v) return false;
    return this.d.whenLocalRealized(v, waitMs);
  }

  /** Asks the controller until it answers or the deadline; an unreachable controller is asked again, 100 ms apart and doubling. */
  private async askControllerUntil(pod: PodQuestion, deadline: number): Promise<PodRealization | undefined> {
    const { clock } = this.d;
    for (let attempt = 0; ; attempt++) {
      const left = deadline - clock.now();
      if (left <= 0 || this.closed) return undefined;
      try {
        return await this.d.askController(pod, left, Math.floor(left * CONFIRM_SHARE));
      } catch (err) {
        if (attempt === 0) this.d.log.warn({ pod: refOf(pod), err: (err as Error).message }, 'new Pod: the controller could not be asked; asking again');
      }
      const pause = Math.min(100 * 2 ** attempt, deadline - clock.now());
      if (pause <= 0) return undefined;
      await this.pauses.sleep(pause);
    }
  }

  private async isolate(pod: PodQuestion, why: string): Promise<void> {
    const ref = refOf(pod);
    const iso: Isolation = { pod, since: this.d.clock.now(), why };
    this.isolated.set(ref, iso);
    this.counts.isolated++;
    this.d.log.warn({ pod: ref, why }, 'new Pod: its policies are not known on this node yet; every new connection of the Pod is dropped until they are');
    await this.d.applyFlows();
    void this.release(ref, iso);
  }

  /** Asks again until the Pod's state is known and enforced here, then hands it to the peers' gate and lifts the isolation. */
  private async release(ref: string, iso: Isolation): Promise<void> {
    const { d } = this;
    const wait = d.backgroundWaitMs ?? 30_000;
    const current = () => !this.closed && this.isolated.get(ref) === iso;
    let failures = 0;
    while (current()) {
      let answer: PodRealization | undefined;
      try {
        answer = await d.askController(iso.pod, wait, d.confirmWithinMs);
        failures = 0;
      } catch {
        await this.pauses.sleep(Math.min(5000, 100 * 2 ** failures++));
        continue;
      }
      if (!current()) return;
      if (!answer) continue;
      this.learn(ref, answer);
      if (!(await this.ownStateIn(answer, wait))) continue;
      if (!current()) return;
      // The peers that lag are guarded before the isolation goes.
      await this.peers.admit(iso.pod);
      if (!current()) return;
      this.isolated.delete(ref);
      this.settled(iso.pod);
      this.counts.released++;
      d.log.info({ pod: ref, isolatedMs: d.clock.now() - iso.since }, 'new Pod: its policies are enforced here; isolation lifted');
      await d.applyFlows().catch((err: unknown) => d.log.warn({ err: (err as Error).message }, 'new Pod: lifting an isolation: applying flows failed; the next sync lifts it'));
      return;
    }
  }

}

