export * from './dnswire.js';
export * from './frame.js';
export { canonicalDnsName, FqdnPatternSet } from '../../policy/fqdn.js';
export * from './learner.js';
export * from './flows.js';
export * from './handler.js';
export * from './learning.js';
