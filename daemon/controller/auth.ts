/**
 * Who is calling the controller's API: the bearer token of a request, checked by the API server
 * with a TokenReview (authentication.k8s.io/v1), as Antrea's controller authenticates its agents
 * through delegated authentication. An agent's token is its Pod's projected ServiceAccount token;
 * on Kubernetes ≥ 1.30 the review also names the Node that Pod runs on
 * (user.extra["authentication.kubernetes.io/node-name"]), which is what limits an agent to its
 * own Node's span.
 *
 * Positive answers are cached for a short TTL under a hash of the token (never the token itself),
 * so a reconnecting agent does not cost a review per request; negative answers are not cached, so
 * a token that just became valid is not refused for the TTL. An API failure is an error, never a
 * verdict: the server answers 503, and nothing is allowed that was not reviewed.
 */
import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { type Clock, realClock } from '../clock.js';
import type { KubeAccess } from '../kube/access.js';

/** The authenticated caller: the Kubernetes user, and the Node its token is bound to when it is. */
export interface AgentIdentity {
  user: string;
  nodeName?: string;
}

/** The TokenReview could not be done or its answer is unusable: the caller is neither allowed nor refused. */
export class AuthUnavailableError extends Error {
  override name = 'AuthUnavailableError';
}

/** The extra key Kubernetes (≥ 1.30) sets on a Pod-bound ServiceAccount token's user. */
export const NODE_NAME_EXTRA = 'authentication.kubernetes.io/node-name';
const TOKENREVIEWS_PATH = '/apis/authentication.k8s.io/v1/tokenreviews';

export interface TokenReviewAuthenticatorOptions {
  /** The controller's access to the API server (only POST is used). */
  api: Pick<KubeAccess, 'postJson'>;
  clock?: Pick<Clock, 'now'>;
  /** How long a positive review is trusted (default 10 s). */
  cacheTtlMs?: number;
  /** At most this many cached reviews (default 4096): expired ones go first, then the oldest. */
  cacheMaxEntries?: number;
  /** spec.audiences of the review; unset means the API server's own audience (a Pod's default token). */
  audiences?: string[];
  /** Per TokenReview request (default 5 000). */
  timeoutMs?: number;
}

/** The bearer token of an Authorization header, or undefined when there is none or it is not a bearer one. */
export function bearerToken(headers: IncomingHttpHeaders): string | undefined {
  const value = headers.authorization;
  if (typeof value !== 'string') return undefined;
  // The scheme is case-insensitive (RFC 9110); the token is the single word after it.
  const m = /^bearer +(\S+) *$/i.exec(value);
  return m?.[1];
}

export class TokenReviewAuthenticator {
  private readonly clock: Pick<Clock, 'now'>;
  private readonly ttlMs: number;
  private readonly maxEntries: number;
  private readonly cache = new Map<string, { identity: AgentIdentity; expiresAt: number }>();
  /** Reviews under way, by token hash: concurrent requests with one token share one review. */
  private readonly pending = new Map<string, Promise<AgentIdentity | undefined>>();

  constructor(private readonly opts: TokenReviewAuthenticatorOptions) {
    this.clock = opts.clock ?? realClock;
    this.ttlMs = opts.cacheTtlMs ?? 10_000;
    this.maxEntries = opts.cacheMaxEntries ?? 4096;
    if (!(this.ttlMs >= 0)) throw new Error(`token review cache TTL ${this.ttlMs} ms is negative`);
    if (!(this.maxEntries >= 1)) throw new Error(`token review cache size ${this.maxEntries} must be at least 1`);
  }

  /**
   * The caller of a request: undefined when it carries no bearer token or the API server does not
   * accept the token; rejects with AuthUnavailableError when the review fails.
   */
  async authenticateRequest(req: { headers: IncomingHttpHeaders }): Promise<AgentIdentity | undefined> {
    const token = bearerToken(req.headers);
    return token === undefined ? undefined : this.authenticateToken(token);
  }

  async authenticateToken(token: string): Promise<AgentIdentity | undefined> {
    const key = createHash('sha256').update(token).digest('hex');
    const now = this.clock.now();
    const hit = this.cache.get(key);
    if (hit && hit.expiresAt > now) return hit.identity;
    if (hit) this.cache.delete(key);
    let review = this.pending.get(key);
    if (!review) {
      review = this.review(token).finally(() => this.pending.delete(key));
      this.pending.set(key, review);
    }
    const identity = await review;
    if (identity && this.ttlMs > 0) this.remember(key, identity);
    return identity;
  }

  private remember(key: string, identity: AgentIdentity): void {
    const now = this.clock.now();
    this.cache.delete(key);
    if (this.cache.size >= this.maxEntries) {
      for (const [k, v] of this.cache) if (v.expiresAt <= now) this.cache.delete(k);
      // Map order is insertion order: the first entries are the oldest.
      for (const k of this.cache.keys()) {
        if (this.cache.size < this.maxEntries) break;
        this.cache.delete(k);
      }
    }
    this.cache.set(key, { identity, expiresAt: now + this.ttlMs });
  }

  private async review(token: string): Promise<AgentIdentity | undefined> {
    const body = {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenReview',
      spec: { token, ...(this.opts.audiences ? { audiences: this.opts.audiences } : {}) },
    };
    let answer: unknown;
    try {
      answer = await this.opts.api.postJson(TOKENREVIEWS_PATH, body, this.opts.timeoutMs ?? 5_000);
    } catch (err) {
      throw new AuthUnavailableError(`cannot review the caller's token with the API server: ${(err as Error).message}`);
    }
    return parseTokenReview(answer);
  }
}

/**
 * The identity a TokenReview answer grants, undefined when it says the token is not authenticated.
 * An answer that is not a TokenReview status, or names no user, or names the Node ambiguously, is
 * an AuthUnavailableError: guessing either way would be wrong.
 */
export function parseTokenReview(answer: unknown): AgentIdentity | undefined {
  const fail = (what: string) => new AuthUnavailableError(`the API server's TokenReview answer ${what}`);
  if (!isRecord(answer) || !isRecord(answer.status)) throw fail('has no status');
  const status = answer.status;
  if (status.authenticated !== true) {
    if (status.authenticated === undefined || status.authenticated === false) return undefined;
    throw fail(`has status.authenticated ${JSON.stringify(status.authenticated)}, not a boolean`);
  }
  const user = status.user;
  if (!isRecord(user) || typeof user.username !== 'string' || user.username === '') throw fail('authenticates the token but names no user (status.user.username)');
  const extra = user.extra;
  if (extra === undefined || extra === null) return { user: user.username };
  if (!isRecord(extra)) throw fail('has a status.user.extra that is not a map');
  const node = extra[NODE_NAME_EXTRA];
  if (node === undefined) return { user: user.username };
  // extra values are lists of strings on the wire; a bound token has exactly one Node.
  if (!Array.isArray(node) || node.length !== 1 || typeof node[0] !== 'string' || node[0] === '') {
    throw fail(`has status.user.extra["${NODE_NAME_EXTRA}"] = ${JSON.stringify(node)}, not one Node name`);
  }
  return { user: user.username, nodeName: node[0] };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}
