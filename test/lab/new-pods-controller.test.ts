/**
 * New Pods' first packets on a dual-stack ptp lab whose agents follow sluice-controller (see
 * new-pods-suite.ts): the ADD asks the controller once where the Pod matters, then the nodes it
 * names with their view versions. Lab npk.
 */
import { newPodsSuite } from './new-pods-suite.js';

newPodsSuite('npk', 'ptp', 'dual', 'controller');
