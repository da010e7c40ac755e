/**
 * The upstream NetworkPolicy cases on an IPv4 ptp lab whose agents follow sluice-controller
 * (`--policy-source controller`; see conformance-suite.ts): the same verdicts, through the
 * controller's spans and each Node's view. Lab mdk.
 */
import { conformanceLabSuite } from './conformance-suite.js';

conformanceLabSuite('mdk', 'ipv4', 'controller');
