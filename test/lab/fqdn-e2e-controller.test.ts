/**
 * FQDN egress end to end with the agent following sluice-controller (fqdn-e2e-suite.ts): the
 * controller sends the fqdn group with its pattern and no member; the Node learns what its Pod
 * resolves and enforces it as a standalone agent does. Lab fqc.
 */
import { fqdnE2eSuite } from './fqdn-e2e-suite.js';

fqdnE2eSuite('fqc', 'controller');
