/** The transparent IPv6 / dual-stack matrix on ptp labs (lab "v6m"); see ipv6-matrix-suite.ts. */
import t from 'tap';
import { runIpv6Matrix } from './ipv6-matrix-suite.js';

await runIpv6Matrix(t, 'ptp', 'v6m');
