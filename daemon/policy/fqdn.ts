/**
 * fqdn peers: how a DNS name matches a rule's pattern (after Antrea's FQDN rules). Names compare
 * lower-case without a trailing dot; `*` matches any run of characters, dots included, so
 * `*.example.com` matches `www.example.com` and `a.b.example.com` but not `example.com`, while
 * `*example.com` also matches `example.com` (and `myexample.com`). A pattern without `*` is an
 * exact name. The one home of these semantics: the engine resolves fqdn peers with them and DNS
 * learning (enforcement/fqdn) decides with them which names are worth learning.
 */
import type { GroupMember } from './types.js';

export const canonicalDnsName = (name: string): string => name.toLowerCase().replace(/\.$/, '');

/** A learned name with its addresses as a member of the fqdn groups whose patterns match it (the same in every mode, so their flows are). */
export function fqdnMember(name: string, ips: readonly string[]): GroupMember {
  return { kind: 'fqdn', ref: name, ips: [...ips].sort(), ports: [] };
}

const escapeRegExp = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A set of fqdn patterns, matched in one step (exact names in a Set, wildcards in one RegExp). */
export class FqdnPatternSet {
  /** Canonical, deduplicated, sorted. */
  readonly patterns: readonly string[];
  private readonly exact = new Set<string>();
  private readonly wildcard: RegExp | undefined;

  constructor(patterns: Iterable<string>) {
    const all = [...new Set([...patterns].map(canonicalDnsName))].sort();
    this.patterns = all;
    const globs: string[] = [];
    for (const p of all) {
      if (p.includes('*')) globs.push(p.split('*').map(escapeRegExp).join('.*'));
      else this.exact.add(p);
    }
    this.wildcard = globs.length > 0 ? new RegExp(`^(?:${globs.join('|')})$`) : undefined;
  }

  get size(): number {
    return this.patterns.length;
  }

  matches(name: string): boolean {
    const n = canonicalDnsName(name);
    return this.exact.has(n) || (this.wildcard?.test(n) ?? false);
  }

  /** Same patterns (order-insensitive)? */
  equals(other: FqdnPatternSet): boolean {
    return this.patterns.length === other.patterns.length && this.patterns.every((p, i) => p === other.patterns[i]);
  }
}
