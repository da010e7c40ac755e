/** Model = datapath on the ptp flavour (see modeldp-suite.ts). Lab mdp. */
import { modelDatapathSuite } from './modeldp-suite.js';

modelDatapathSuite('mdp', 'ptp');
