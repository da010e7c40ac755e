export { type CtEntry, describeEntry, flushTuple, parseConntrackDump } from './entries.js';
export { type ConnectionPolicy, judgeConnections, probeOf } from './judge.js';
export { type ConntrackIo, ConnectionSweeper, type SweeperStatus } from './sweeper.js';
