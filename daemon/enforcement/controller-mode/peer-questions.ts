/**
 * A controller-mode agent's direct questions to other Nodes, one open per Node however many new
 * Pods wait on it.
 *
 * In controller mode the question is not about a Pod but about a Node's view: "do you enforce
 * your view as of these versions?" (peers.ts, `versions`), and the answer only grows: a Node
 * that enforces versions V enforces every V' that V covers. So every new Pod waiting on a Node
 * can share one question, asked for the highest version of each kind among them: its yes answers
 * them all. A whole cluster starting at once needs this: each agent's Pods wait on the same
 * thousands of Nodes (the ones the controller has no report from yet), and one question per Pod
 * and Node was ~80 000 per agent within two minutes at 150 000 Pods and 5 000 Nodes
 * (bench/scale-lab).
 *
 * A Pod that arrives while its Node's question is open waits on it if that question covers its
 * versions, or for the next one otherwise. Each waits only within its own time: at its deadline
 * it is answered no (the gate guards it from that Node and keeps asking). A failed question
 * (the agent unreachable) fails the waiters it was asked for; the gate asks again with backoff.
 */
import type { Clock, TimerHandle } from '../../clock.js';
import { CONTROLPLANE_KINDS, type ViewVersions, viewCovers } from '../../controlplane/types.js';
import type { PodQuestion } from '../newpods/index.js';

export interface PeerQuestionsDeps {
  clock: Clock;
  /** One question to the agent at `address` (newpods/peers.ts askPeer); rejects when it cannot be asked. */
  askPeer(address: string, pod: PodQuestion, waitMs: number, versions: ViewVersions): Promise<boolean>;
}

/** After a no, a waiter with less time than this left is not asked for again (see next). */
export const MIN_REASK_MS = 100;

interface Waiter {
  pod: PodQuestion;
  versions: ViewVersions;
  deadline: number;
  timer: TimerHandle;
  settle(outcome: boolean | Error): void;
}

interface NodeQuestions {
  waiters: Set<Waiter>;
  /** The versions the open question asks for. */
  open?: ViewVersions | undefined;
}

/** The highest version of each kind among `vs` (not empty). */
function highest(vs: Iterable<ViewVersions>): ViewVersions {
  let out: ViewVersions | undefined;
  for (const v of vs) {
    if (!out) out = { ...v };
    else for (const k of CONTROLPLANE_KINDS) if (v[k] > out[k]) out[k] = v[k];
  }
  return out!;
}

export class PeerQuestions {
  private readonly nodes = new Map<string, NodeQuestions>();
  private readonly counts = { asked: 0, waited: 0 };

  constructor(private readonly d: PeerQuestionsDeps) {}

  /** Whether the agent at `address` enforces its view as of `versions`, within `waitMs`; false at the deadline. */
  ask(address: string, pod: PodQuestion, versions: ViewVersions, waitMs: number): Promise<boolean> {
    const { clock } = this.d;
    const q = this.nodes.get(address) ?? { waiters: new Set<Waiter>() };
    this.nodes.set(address, q);
    this.counts.waited++;
    return new Promise<boolean>((resolve, reject) => {
      const w: Waiter = {
        pod,
        versions,
        deadline: clock.now() + waitMs,
        timer: clock.setTimeout(() => w.settle(false), waitMs),
        settle: (outcome) => {
          if (!q.waiters.delete(w)) return;
          clock.clearTimeout(w.timer);
          this.forgetIfIdle(address, q);
          if (outcome instanceof Error) reject(outcome);
          else resolve(outcome);
        },
      };
      q.waiters.add(w);
      this.next(address, q);
    });
  }

  /** Answers every waiter no now (the agent stops); questions still open end on their own. */
  close(): void {
    for (const q of this.nodes.values()) for (const w of [...q.waiters]) w.settle(false);
  }

  status(): { asked: number; waited: number; open: number } {
    let open = 0;
    for (const q of this.nodes.values()) if (q.open) open++;
    return { ...this.counts, open };
  }

  /**
   * Asks the Node for every waiter, unless a question is open. After a no, only for a waiter with
   * at least MIN_REASK_MS left: the Node answers no when the long poll ends, which is about when
   * the waiters' own time does, and asking again for the last milliseconds would only spin.
   */
  private next(address: string, q: NodeQuestions, afterNo = false): void {
    if (q.open || q.waiters.size === 0) return;
    const now = this.d.clock.now();
    const waitMs = Math.max(...[...q.waiters].map((w) => w.deadline - now));
    if (afterNo && waitMs < MIN_REASK_MS) return;
    const asked = highest([...q.waiters].map((w) => w.versions));
    // The question names one Pod it is asked for; the Node answers by the versions.
    const pod = q.waiters.values().next().value!.pod;
    q.open = asked;
    this.counts.asked++;
    const covered = () => [...q.waiters].filter((w) => viewCovers(asked, w.versions));
    this.d.askPeer(address, pod, Math.max(0, waitMs), asked).then(
      (yes) => {
        q.open = undefined;
        // A no (the long poll ran out) answers nobody: each waiter waits out its own time.
        if (yes) for (const w of covered()) w.settle(true);
        this.forgetIfIdle(address, q);
        this.next(address, q, !yes);
      },
      (err: unknown) => {
        q.open = undefined;
        for (const w of covered()) w.settle(err instanceof Error ? err : new Error(String(err)));
        this.forgetIfIdle(address, q);
        this.next(address, q);
      },
    );
  }

  private forgetIfIdle(address: string, q: NodeQuestions): void {
    if (!q.open && q.waiters.size === 0 && this.nodes.get(address) === q) this.nodes.delete(address);
  }
}
