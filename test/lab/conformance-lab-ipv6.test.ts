/** The upstream NetworkPolicy cases on an IPv6-only ptp lab (see conformance-suite.ts). Lab mdc6. */
import { conformanceLabSuite } from './conformance-suite.js';

conformanceLabSuite('mdc6', 'ipv6');
