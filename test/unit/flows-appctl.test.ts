// daemon/ovs/bridge.ts: ovs-appctl reaches ovs-vswitchd by the control socket its pid file names, so
// an agent in another PID namespace (the DaemonSet's agent container next to its ovs container) can.
import t from 'tap';
import { vswitchdControlSocket } from '../../daemon/ovs/bridge.js';

t.test('the control socket named by the pid file', async (t) => {
  t.equal(vswitchdControlSocket('/var/run/openvswitch', '44\n'), '/var/run/openvswitch/ovs-vswitchd.44.ctl');
  t.equal(vswitchdControlSocket('/run/sluice-lab/sl/node-1/ovs', '1234'), '/run/sluice-lab/sl/node-1/ovs/ovs-vswitchd.1234.ctl');
  t.equal(vswitchdControlSocket('/x', undefined), undefined, 'no pid file: ovs-appctl looks it up itself');
  t.equal(vswitchdControlSocket('/x', ''), undefined);
  t.equal(vswitchdControlSocket('/x', 'garbage'), undefined);
});
