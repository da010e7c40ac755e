/**
 * sluicectl's failure output: a usage mistake comes with the help text; an exception while a
 * command runs is one line naming it (no help text burying it, as a RangeError once was).
 */
import t from 'tap';
import { failure } from '../../daemon/ctl/failure.js';

t.test('an exception while running: one line, no help', async (t) => {
  t.same(failure(null, new RangeError('Invalid string length\n    at JSON.stringify')), { text: 'sluicectl: Invalid string length', help: false });
});

t.test('a usage mistake: yargs\' message with the help text', async (t) => {
  t.same(failure('Missing required argument: f', undefined), { text: 'Missing required argument: f', help: true });
});
