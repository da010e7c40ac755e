/**
 * Every expectation of cni-binary.test.ts, with the runtime running the standalone plugin
 * directly: the front end and the standalone plugin must behave the same.
 */
process.env.SLUICE_CNI_UNDER_TEST = 'standalone';
await import('./cni-binary.test.js');
