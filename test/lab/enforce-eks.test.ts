/** Enforcement = simulate, with real packets, on the EKS-style primary flavour (lab en2). See enforce-matrix.ts. */
import t from 'tap';
import { skipReason } from './labcli-helpers.js';
import { runMatrix } from './enforce-matrix.js';

const reason = skipReason();
if (reason) t.plan(0, reason);
else await runMatrix(t, 'en2', 'eks');
