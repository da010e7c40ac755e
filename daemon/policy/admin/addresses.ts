/**
 * Address peers of the admin-policy kinds: `networks` (CIDRs) and `domainNames`, checked as
 * the upstream CRDs check them (isCIDR, list-type set, 1–25 items, the domain-name pattern).
 */
import { formatCidr, parseCidr, parseIp } from '../cidr.js';
import type { Peer } from '../types.js';
import { type Problems, listField } from './common.js';

/**
 * Parses a CIDR as the CRD's `isCIDR()` accepts it (IPv4 or IPv6, host bits allowed) and
 * returns it canonical (network address, shortest IPv6 form), or why it is not one.
 */
export function canonicalCidr(v: unknown): string | { error: string } {
  if (typeof v !== 'string') return { error: 'must be a string in CIDR notation' };
  if (v.length > 43) return { error: 'must be at most 43 characters' };
  const slash = v.indexOf('/');
  if (slash < 0) return { error: `"${v}" is not in CIDR notation (missing /prefix-length)` };
  const ip = parseIp(v.slice(0, slash));
  if (!ip) return { error: `"${v}" is not a valid IPv4 or IPv6 CIDR` };
  const parsed = parseCidr(v);
  if (!parsed) return { error: `"${v}": prefix length must be a number from 0 to ${ip.family === 4 ? 32 : 128}` };
  return formatCidr(parsed);
}

/**
 * A list-type set of 1–25 address peers (the CRDs' `networks` and `domainNames`): each item
 * becomes a peer or is reported with why not, and a duplicate (as written) is refused.
 */
function peerSet(v: unknown, field: string, p: Problems, toPeer: (item: unknown) => Peer | { error: string }): Peer[] | undefined {
  const list = listField(v, field, { min: 1, max: 25, required: true }, p);
  if (!list) return undefined;
  const out: Peer[] = [];
  const seen = new Set<unknown>();
  let ok = true;
  for (const [i, item] of list.entries()) {
    const peer = toPeer(item);
    if ('error' in peer) {
      p.add(`${field}[${i}]`, peer.error);
      ok = false;
      continue;
    }
    if (seen.has(item)) {
      p.add(`${field}[${i}]`, `duplicate entry "${String(item)}"`);
      ok = false;
      continue;
    }
    seen.add(item);
    out.push(peer);
  }
  return ok ? out : undefined;
}

/** `networks`: 1–25 distinct CIDRs (a list-type set), each one an ipBlock peer. */
export function networks(v: unknown, field: string, p: Problems): Peer[] | undefined {
  return peerSet(v, field, p, (item) => {
    const cidr = canonicalCidr(item);
    return typeof cidr === 'string' ? { kind: 'ipBlock', cidr, except: [] } : cidr;
  });
}

// One DNS label: letters, digits, '-' and '_' inside, alphanumeric at both ends.
const DNS_LABEL = '[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?';
const DOMAIN_NAME = new RegExp(`^(\\*\\.)?(${DNS_LABEL}\\.)+${DNS_LABEL}\\.?$`);

/** `domainNames`: 1–25 distinct names, exact or with a leading `*.` wildcard. */
export function domainNames(v: unknown, field: string, p: Problems): Peer[] | undefined {
  return peerSet(v, field, p, (item) =>
    typeof item === 'string' && DOMAIN_NAME.test(item)
      ? { kind: 'fqdn', pattern: item.toLowerCase().replace(/\.$/, '') }
      : { error: `${JSON.stringify(item)} is not a domain name (exact, or "*." followed by a domain)` },
  );
}
