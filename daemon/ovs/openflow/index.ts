export { type BundleEntry, type ControllerLog, type ControllerOptions, type ControllerStats, FlowBundleError, OpenFlowController, OpenFlowError } from './controller.js';
export { BoundedQueue } from './queue.js';
export { CT_STATE, OFPP, OFPR, type PacketIn, type PacketOut, type PacketOutAction, type SwitchFeatures } from './wire.js';
export { type DispatchStats, type PacketInHandler, runPacketInLoop } from './dispatch.js';
