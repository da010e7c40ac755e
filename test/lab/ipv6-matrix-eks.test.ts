/**
 * The transparent IPv6 / dual-stack matrix on EKS-style labs (lab "v6e"), with the VPC CNI's Pod
 * wiring, the IPv4 egress path of IPv6-only Pods, and NetworkPolicy = simulate over IPv6; see
 * ipv6-matrix-suite.ts.
 */
import t from 'tap';
import { runIpv6Matrix } from './ipv6-matrix-suite.js';

await runIpv6Matrix(t, 'eks', 'v6e');
