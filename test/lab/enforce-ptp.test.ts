/** Enforcement = simulate, with real packets, on the ptp primary flavour (lab en1). See enforce-matrix.ts. */
import t from 'tap';
import { skipReason } from './labcli-helpers.js';
import { runMatrix } from './enforce-matrix.js';

const reason = skipReason();
if (reason) t.plan(0, reason);
else await runMatrix(t, 'en1', 'ptp');
