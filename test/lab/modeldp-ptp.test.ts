/**
 * Model = datapath on the ptp flavour (see modeldp-suite.ts), dual-stack: every probe in both
 * families, IPv4 and IPv6. Lab mdp.
 */
import { modelDatapathSuite } from './modeldp-suite.js';

modelDatapathSuite('mdp', 'ptp', { ipFamily: 'dual' });
