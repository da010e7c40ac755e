#!/usr/bin/env node
/**
 * Probes targets from the namespace it runs in, all at once, and prints one verdict per target
 * (probes.ts says what each verdict means). For namespaces without a workload's probe socket.
 * stdin:  {"timeoutMs": 1500, "targets": [{"ip": "10.10.1.2", "port": 80, "protocol": "TCP"}, ...]}
 *         (IPv4 or IPv6 addresses; ICMP over IPv6 is an ICMPv6 echo request)
 * stdout: [{"verdict": "allow", "detail": "echo", "ms": 3}, ...] in target order.
 */
import { readFileSync } from 'node:fs';
import { probeTargets, type Target } from './probes.js';

async function main(): Promise<void> {
  const input = JSON.parse(readFileSync(0, 'utf8')) as { timeoutMs?: number; targets: Target[] };
  const timeoutMs = input.timeoutMs ?? 1500;
  const results = await probeTargets(input.targets, timeoutMs);
  process.stdout.write(JSON.stringify(results) + '\n');
}

main().catch((err: Error) => {
  process.stderr.write(`prober: ${err.message}\n`);
  process.exit(1);
});
