#!/usr/bin/env node
/**
 * sluice-agent: `sluice-agent [--config /etc/sluice/agent.yaml]`. Exits 2 on a bad config (the
 * message names the field), 1 when start-up fails; SIGTERM/SIGINT stop serving but leave the
 * datapath in place so Pods keep their connectivity across restarts.
 */
import { pino } from 'pino';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { Agent } from './agent.js';
import { ConfigError, DEFAULT_CONFIG_PATH, loadConfig } from './config.js';
import { enforcementWanted, startEnforcement } from './enforcement/index.js';
import { ATTACH_STEPS, type AttachStep } from './podattach.js';

async function main(): Promise<number> {
  const argv = yargs(hideBin(process.argv))
    .scriptName('sluice-agent')
    .usage('$0 [--config FILE]\n\nThe sluice node agent: OVS bridge behind the primary CNI, CNI socket, host networking.')
    .option('config', { alias: 'c', type: 'string', default: DEFAULT_CONFIG_PATH, describe: 'YAML configuration file' })
    .strict()
    .help()
    .parseSync();

  let config;
  try {
    config = await loadConfig(argv.config);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`sluice-agent: invalid configuration: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const log = pino({ level: config.logLevel, base: { node: config.nodeName } });

  // Test hook only: SLUICE_FAILPOINT=<step> makes every ADD fail after that step.
  const failpoint = process.env.SLUICE_FAILPOINT;
  if (failpoint && !(ATTACH_STEPS as readonly string[]).includes(failpoint)) {
    process.stderr.write(`sluice-agent: SLUICE_FAILPOINT must be one of ${ATTACH_STEPS.join(', ')}\n`);
    return 2;
  }
  if (failpoint) log.warn({ failpoint }, 'SLUICE_FAILPOINT set: every ADD will fail (testing only)');

  let agent: Agent;
  try {
    const wanted = enforcementWanted(config);
    log.info({ reason: wanted.why }, wanted.on ? 'policy enforcement on' : 'policy enforcement OFF (datapath only)');
    const enforcement = wanted.on ? (await startEnforcement(config, log)).hooks : undefined;
    agent = await Agent.start({ config, log, ...(failpoint ? { failAfter: failpoint as AttachStep } : {}), ...(enforcement ? { enforcement } : {}) });
  } catch (err) {
    log.fatal({ err: (err as Error).message }, 'startup failed');
    process.stderr.write(`sluice-agent: startup failed: ${(err as Error).message}\n`);
    return 1;
  }
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      log.info({ signal }, 'stopping (datapath left in place)');
      void agent.close().then(resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`sluice-agent: ${(err as Error).stack ?? err}\n`);
    process.exit(1);
  },
);
