/**
 * The fqdn patterns of the policies and how a DNS name matches them, with the policy engine's
 * semantics (engine.ts fqdnMembers; Antrea's FQDN rules): names compare lower-case without a
 * trailing dot; `*` matches any run of characters, dots included, so `*.example.com` matches
 * `www.example.com` and `a.b.example.com` but not `example.com`, while `*example.com` also
 * matches `example.com` (and `myexample.com`). A pattern without `*` is an exact name.
 */
import type { InternalRule } from '../../policy/types.js';

export const canonicalDnsName = (name: string): string => name.toLowerCase().replace(/\.$/, '');

const escapeRegExp = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export class FqdnPatternSet {
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

/** The fqdn patterns referenced by egress rules (the engine's `rules()`: every valid rule). */
export function fqdnPatternsOf(rules: readonly InternalRule[]): FqdnPatternSet {
  const out: string[] = [];
  for (const r of rules) {
    if (r.direction !== 'Egress') continue;
    for (const p of r.peers ?? []) if (p.kind === 'fqdn') out.push(p.pattern);
  }
  return new FqdnPatternSet(out);
}
