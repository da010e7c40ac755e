export * from './compile.js';
export * from './conjids.js';
export * from './egress-sources.js';
export * from './input.js';
export * from './portmasks.js';
export * from './priorities.js';
export * from './punt.js';
export * from './stats.js';
