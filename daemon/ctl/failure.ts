/**
 * What sluicectl prints when a command fails. A usage mistake (yargs' own message) comes with the
 * help text; an error thrown while a command runs is one line naming it, without the help text,
 * which would bury the message and suggest the command line was wrong. Pure.
 */
export function failure(msg: string | null | undefined, err: Error | undefined): { text: string; help: boolean } {
  if (err) return { text: `sluicectl: ${err.message.split('\n')[0] || err.name}`, help: false };
  return { text: msg ?? 'sluicectl: failed', help: true };
}
