/** New Pods' first packets on a dual-stack ptp lab (new-pods-suite.ts). */
import { newPodsSuite } from './new-pods-suite.js';

newPodsSuite('np1', 'ptp', 'dual');
