/** Model = datapath on the EKS-style flavour (see modeldp-suite.ts). Lab mde. */
import { modelDatapathSuite } from './modeldp-suite.js';

modelDatapathSuite('mde', 'eks');
