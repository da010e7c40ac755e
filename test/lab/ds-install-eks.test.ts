// test-schedule: exclusive: podman builds and runs the image, and the install counts lost pings across a rolling update.
// sluice installed through its image and manifests on the EKS-style primary (a /32 per Pod, the
// VPC CNI's conflist shape): install on busy nodes, enforcement = simulate, roll, uninstall.
import { dsInstallSuite } from './ds-install-suite.js';

dsInstallSuite({ lab: 'dse', primary: 'eks', full: false });
