/** New Pods' first packets on an EKS-style (AWS VPC CNI flavour) dual-stack lab (new-pods-suite.ts). */
import { newPodsSuite } from './new-pods-suite.js';

newPodsSuite('np2', 'eks', 'dual');
