import t from 'tap';
import { portIds } from '../../daemon/node/attachment.js';
import { podPortRows } from '../../daemon/ctl/node-pods.js';

const base = { containerId: 'c0ffee0123456789', podNamespace: 'x', podName: 'a', netns: '/var/run/netns/a', ifName: 'eth0', hostVeth: 'veth1', ofport: 7, mac: '0a:00:00:00:00:01' };
const v6only = { ...base, ips: ['fd00:10:1::11'], egressV4: { ifName: 'v4if0', hostVeth: 'vethe1', ofport: 8, mac: '0a:00:00:00:0e:01', ip: '169.254.172.11' } };

t.test('node pods: a Pod port, and an IPv6-only Pod\'s IPv4 egress port as its own row', async (t) => {
  const plain = { name: 'veth2', ofport: 9, ids: portIds({ ...base, containerId: 'c2', podName: 'b', hostVeth: 'veth2', ips: ['10.1.0.12'] }) };
  const rows = podPortRows([plain, { name: 'veth1', ofport: 7, ids: portIds(v6only) }], new Map([['vethe1', 8]]));
  t.same(rows, [
    ['veth2', '9', 'x/b', '10.1.0.12', '0a:00:00:00:00:01', 'c2', ''],
    ['veth1', '7', 'x/a', 'fd00:10:1::11', '0a:00:00:00:00:01', 'c0ffee012345', ''],
    ['vethe1', '8', 'x/a (IPv4 egress)', '169.254.172.11', '0a:00:00:00:0e:01', 'c0ffee012345', ''],
  ]);
});

t.test('node pods: a missing or unattached egress port is a problem on its row', async (t) => {
  const rec = { name: 'veth1', ofport: 7, ids: portIds(v6only) };
  t.equal(podPortRows([rec], new Map())[1]?.[6], 'IPv4 egress port missing from the bridge');
  t.equal(podPortRows([rec], new Map())[1]?.[1], '-');
  t.equal(podPortRows([rec], new Map([['vethe1', -1]]))[1]?.[6], 'IPv4 egress port not attached');
  t.equal(podPortRows([{ ...rec, ofport: -1, error: 'could not open network device veth1' }], new Map([['vethe1', 8]]))[0]?.[6], 'could not open network device veth1', 'the Pod port\'s own error');
});
