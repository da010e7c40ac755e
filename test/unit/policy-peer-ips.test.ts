/**
 * PeerIps (daemon/policy/peer-ips.ts): a group's peer addresses kept as members come, change and
 * go, with members held whole or as their addresses alone, and addresses that several members
 * hold (a Node's address in its host-network Pods). Random walks against the union recomputed
 * from the members at each step.
 */
import t from 'tap';
import { knownListDiff } from '../../daemon/policy/liststeps.js';
import { PeerIps, type PeerMember, peerAddresses } from '../../daemon/policy/peer-ips.js';
import type { GroupMember } from '../../daemon/policy/types.js';
import { rng } from './policy-core-helpers.js';

const ip = (n: number) => `10.9.${(n >> 8) & 255}.${n & 255}`;

t.test('a random walk of members: the addresses are the union of the members, each held as often as members hold it', async (t) => {
  for (const seed of [3, 17, 41]) {
    const rand = rng(seed).next;
    // A small pool, so that members share addresses often.
    const pool = 40;
    const randomIps = () => Array.from({ length: Math.floor(rand() * 3) }, () => ip(Math.floor(rand() * pool)));
    const randomMember = (key: string): PeerMember => {
      const ips = randomIps();
      const r = rand();
      if (r < 0.3 && ips.length === 1) return ips[0]!;
      if (r < 0.5) return ips;
      const kind = rand() < 0.15 ? 'service' : 'pod';
      return { kind, ref: key, ips, ports: kind === 'service' ? [{ protocol: 'TCP', containerPort: 80 }] : [] } as GroupMember;
    };
    const members = new Map<string, PeerMember>();
    for (let i = 0; i < 30; i++) members.set(`m${i}`, randomMember(`m${i}`));
    const peer = new PeerIps(members);
    let failures = 0;
    for (let step = 0; step < 800; step++) {
      const key = `m${Math.floor(rand() * 45)}`;
      const old = members.get(key);
      const now = rand() < 0.25 ? undefined : randomMember(key);
      const before = peer.sorted;
      peer.update(key, old, now);
      if (now === undefined) members.delete(key);
      else members.set(key, now);

      const held = new Map<string, number>();
      for (const m of members.values()) for (const a of peerAddresses(m)) held.set(a, (held.get(a) ?? 0) + 1);
      const want = [...held.keys()].sort();
      const got = [...peer.sorted];
      if (JSON.stringify(got) !== JSON.stringify(want)) {
        failures++;
        t.same(got, want, `seed ${seed} step ${step}: the addresses are the union of the members'`);
      }
      for (let n = 0; n < pool; n++) {
        if (peer.holders(ip(n)) !== (held.get(ip(n)) ?? 0)) {
          failures++;
          t.equal(peer.holders(ip(n)), held.get(ip(n)) ?? 0, `seed ${seed} step ${step}: members holding ${ip(n)}`);
        }
      }
      const services = [...members].filter(([, m]) => typeof m === 'object' && !Array.isArray(m) && (m as GroupMember).kind === 'service').map(([k]) => k).sort();
      if (JSON.stringify([...peer.services.keys()].sort()) !== JSON.stringify(services)) {
        failures++;
        t.same([...peer.services.keys()].sort(), services, `seed ${seed} step ${step}: the Service members`);
      }
      // A change is a recorded step of the list before: exactly the addresses that came and went.
      if (peer.sorted !== before) {
        const diff = knownListDiff(before, peer.sorted);
        const was = new Set(before);
        const is = new Set(peer.sorted);
        if (!diff || JSON.stringify(diff.come) !== JSON.stringify([...is].filter((a) => !was.has(a)).sort()) || JSON.stringify(diff.gone) !== JSON.stringify([...was].filter((a) => !is.has(a)).sort())) {
          failures++;
          t.fail(`seed ${seed} step ${step}: the new list is a recorded step with exactly what came and went`);
        }
      }
      if (failures > 5) break;
    }
    t.equal(failures, 0, `seed ${seed}: every step agrees with the union of the members`);
  }
});

t.test('an address two members hold stays until the last of them goes', async (t) => {
  const node: GroupMember = { kind: 'pod', ref: 'ns/host-a', ips: ['10.0.0.1'], ports: [] };
  const peer = new PeerIps(new Map<string, PeerMember>([['pod:ns/host-a', node], ['pod:ns/host-b', '10.0.0.1'], ['pod:ns/c', ['10.0.0.2', 'fd00::2']]]));
  t.same([...peer.sorted], ['10.0.0.1', '10.0.0.2', 'fd00::2']);
  t.equal(peer.holders('10.0.0.1'), 2);
  peer.update('pod:ns/host-a', node, undefined);
  t.same([...peer.sorted], ['10.0.0.1', '10.0.0.2', 'fd00::2'], 'host-b still holds it');
  t.equal(peer.holders('10.0.0.1'), 1);
  peer.update('pod:ns/host-b', '10.0.0.1', '10.0.0.3');
  t.same([...peer.sorted], ['10.0.0.2', '10.0.0.3', 'fd00::2'], 'gone with the last member holding it');
  t.equal(peer.holders('10.0.0.1'), 0);
});
