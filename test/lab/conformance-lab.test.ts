/** The upstream NetworkPolicy cases on an IPv4 ptp lab (see conformance-suite.ts). Lab mdc. */
import { conformanceLabSuite } from './conformance-suite.js';

conformanceLabSuite('mdc', 'ipv4');
