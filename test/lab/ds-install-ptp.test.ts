// test-schedule: exclusive: podman builds and runs the image, and the install counts lost pings across a rolling update.
// sluice installed through its image and manifests on the ptp primary: every step of
// ds-install-suite.ts (install on busy nodes, enforcement, roll, restart, refusal, uninstall).
import { dsInstallSuite } from './ds-install-suite.js';

dsInstallSuite({ lab: 'dsi', primary: 'ptp', full: true });
