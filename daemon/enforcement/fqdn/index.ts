export * from './dnswire.js';
export * from './frame.js';
export * from './patterns.js';
export * from './learner.js';
export * from './flows.js';
export * from './handler.js';
export * from './learning.js';
