/** FQDN egress end to end with a standalone agent (fqdn-e2e-suite.ts). Lab fqe. */
import { fqdnE2eSuite } from './fqdn-e2e-suite.js';

fqdnE2eSuite('fqe', 'standalone');
