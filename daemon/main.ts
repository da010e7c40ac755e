#!/usr/bin/env node
/**
 * sluice-agent: `sluice-agent [--config /etc/sluice/agent.yaml]`. Exits 2 on a bad config (the
 * message names the field), 1 when start-up fails; SIGTERM/SIGINT stop serving but leave the
 * datapath in place so Pods keep their connectivity across restarts.
 *
 * `--cleanup` (uninstall; daemon/node/cleanup.ts) instead gives every Pod its primary-CNI route back and
 * removes everything sluice put on the node, then exits 0 (1 with what failed). With
 * `--cleanup-then-wait` or env SLUICE_CLEANUP=1 (the uninstall DaemonSet mode) it then idles until
 * SIGTERM, answering /readyz on the health address, so the Pod stays Ready and `rollout status` ends.
 */
import { main } from './agent-program.js';

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`sluice-agent: ${(err as Error).stack ?? err}\n`);
    process.exit(1);
  },
);
