export { type CtEntry, describeEntry, flushTuple, parseConntrackDump } from './entries.js';
export { type ConnectionPolicy, judgeConnections, probeOf } from './judge.js';
export { BLOCK_MS, type BlockedConnection, type ConntrackIo, ConnectionSweeper, MAX_BLOCKED, type SweeperStatus } from './sweeper.js';
