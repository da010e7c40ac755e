/**
 * Model = datapath on the EKS-style flavour (see modeldp-suite.ts), dual-stack: every probe in
 * both families, IPv4 and IPv6 (each Pod an IPv6 /128 with its link-local gateway, as the VPC CNI
 * wires it). Lab mde.
 */
import { modelDatapathSuite } from './modeldp-suite.js';

modelDatapathSuite('mde', 'eks', { ipFamily: 'dual' });
