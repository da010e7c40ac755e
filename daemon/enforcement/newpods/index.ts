/** A new Pod's first packets judged by the policy in force on every node (gate.ts). */
export { type AdmitOutcome, type NewPod, NewPodGate, type NewPodGateDeps } from './gate.js';
export { askPeer, MAX_WAIT_MS, parseQuestion, type PodQuestion, questionPath } from './peers.js';
export { PUBLICATION_PATCH_TYPE, publicationPatch, publicationPath } from './publication.js';
