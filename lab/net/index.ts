/** The lab's network layer: see lab/net/README.md for the topology contract. */
export * from './names.js';
export * from './cni-config.js';
export * from './cni-install.js';
export * from './cni-runner.js';
export * from './exec.js';
export * from './service-nat.js';
export * from './lab.js';
export * from './ovs.js';
export * from './probe-runner.js';
export * from './sandbox.js';
export * from './teardown.js';
export * from './topology.js';
export * from './workload-process.js';
export * from './prereq.js';
