import t from 'tap';
import { CONFIG_DEFAULTS, ConfigError, parseConfig } from '../../daemon/config.js';

const env = { NODE_NAME: 'node-9' };

t.test('empty file gives the documented defaults', async (t) => {
  // datapath: auto, on a kernel with the openvswitch module.
  const c = parseConfig('', 'a.yaml', env, () => ({ loaded: true, loadable: true }));
  t.same(c, {
    nodeName: 'node-9',
    bridge: 'br-int',
    datapath: 'system',
    datapathWhy: 'the openvswitch kernel module is loaded',
    iptablesBackend: 'auto',
    gateway: 'antrea-gw0',
    serviceCIDRs: [],
    socketPath: '/var/run/sluice/cni.sock',
    ovsRunDir: '/var/run/openvswitch',
    stateDir: '/var/lib/sluice',
    healthAddress: { host: '127.0.0.1', port: 9376 },
    logLevel: 'info',
    resyncIntervalSeconds: 60,
    flowCheckIntervalSeconds: 5,
    rtTablesFile: CONFIG_DEFAULTS.rtTablesFile,
    cniBinDir: '/opt/cni/bin',
    cniCacheDir: '/var/lib/cni',
    auditLogPath: '/var/log/antrea/networkpolicy/np.log',
    packetInRate: 5000,
    networkPolicyConnections: 'cut',
    realizationPort: 9378,
    policySource: 'standalone',
    controllerServer: 'https://sluice-controller.sluice-system.svc:443',
    controllerCAFile: '',
    controllerTokenFile: '/var/run/secrets/kubernetes.io/serviceaccount/token',
  });
  t.notOk('cniConfDir' in c, 'absent cniConfDir = the chain is not kept');
  t.notOk('kubeconfig' in c, 'absent kubeconfig = in-cluster');
  t.notOk('nodeIP' in c, 'absent nodeIP = from the Node object');
});

t.test('the lab contract', async (t) => {
  const c = parseConfig(
    [
      'nodeName: node-1',
      'kubeconfig: /run/sluice-lab/sl/kubeconfig',
      'datapath: netdev',
      'serviceCIDRs: [10.96.0.0/16, 10.97.0.0/16]',
      'socketPath: /run/sluice-lab/sl/node-1/cni.sock',
      'ovsRunDir: /run/sluice-lab/sl/node-1/ovs',
      'healthAddress: "127.0.0.1:0"',
      'logLevel: debug',
      'nodeIP: 192.168.77.11',
      'rtTablesFile: ""',
      'resyncIntervalSeconds: 2.5',
    ].join('\n'),
    'lab.yaml',
    env,
  );
  t.equal(c.nodeName, 'node-1');
  t.equal(c.kubeconfig, '/run/sluice-lab/sl/kubeconfig');
  t.equal(c.datapath, 'netdev');
  t.same(c.serviceCIDRs, ['10.96.0.0/16', '10.97.0.0/16']);
  t.same(c.healthAddress, { host: '127.0.0.1', port: 0 });
  t.equal(c.nodeIP, '192.168.77.11');
  t.equal(c.rtTablesFile, null);
  t.equal(c.resyncIntervalSeconds, 2.5);
  t.equal(parseConfig('packetInRate: 20', 'a', env).packetInRate, 20, 'packetInRate');
  t.equal(parseConfig('networkPolicyConnections: keep', 'a', env).networkPolicyConnections, 'keep', 'networkPolicyConnections');
  t.match(parseConfig('policySource: controller\ncontrollerServer: https://10.0.0.9:443\ncontrollerCAFile: /etc/sluice/ca.crt\ncontrollerTokenFile: ""', 'a', env), {
    policySource: 'controller', controllerServer: 'https://10.0.0.9:443', controllerCAFile: '/etc/sluice/ca.crt', controllerTokenFile: '',
  }, 'controller mode settings');
  t.same(parseConfig('serviceCIDRs: 10.96.0.0/12', 'a', env).serviceCIDRs, ['10.96.0.0/12'], 'a single CIDR string is accepted');
});

t.test('invalid settings name the file and the field', async (t) => {
  const cases: [string, RegExp][] = [
    ['datapath: kernel', /^x\.yaml: datapath: must be "system", "netdev" or "auto", got "kernel"$/],
    ['bridgee: br-int', /^x\.yaml: bridgee: unknown setting/],
    ['serviceCIDRs: [10.96.0.1/12]', /^x\.yaml: serviceCIDRs\[0\]: "10.96.0.1\/12" has host bits set$/],
    ['serviceCIDRs: []', /serviceCIDRs: must be a non-empty list/],
    ['serviceCIDRs: [42]', /serviceCIDRs\[0\]: must be a string/],
    ['nodeIP: 10.0.0', /nodeIP: "10.0.0" is not an IPv4 address/],
    ['healthAddress: 9376', /healthAddress: must be a non-empty string, got 9376/],
    ['healthAddress: "x:70000"', /healthAddress: must be host:port/],
    ['logLevel: loud', /logLevel: must be one of fatal, error/],
    ['socketPath: relative/cni.sock', /socketPath: must be an absolute path/],
    ['gateway: this-name-is-too-long', /gateway: "this-name-is-too-long" is not a valid interface name/],
    ['gateway: br-int', /gateway: must differ from bridge/],
    ['resyncIntervalSeconds: 0', /resyncIntervalSeconds: must be a positive number/],
    ['bridge: 3', /bridge: must be a non-empty string, got 3/],
    ['networkPolicyConnections: drop', /^x\.yaml: networkPolicyConnections: must be "cut" .* or "keep" .*got "drop"$/],
    ['packetInRate: 0', /^x\.yaml: packetInRate: must be a whole number of packets per second from 1 to 2147483647, got 0$/],
    ['packetInRate: 2.5', /packetInRate: must be a whole number/],
    ['packetInRate: "100"', /packetInRate: must be a whole number .*got "100"/],
    ['packetInRate: 4294967295', /packetInRate: must be a whole number/],
    ['policySource: central', /^x\.yaml: policySource: must be "standalone" .* or "controller" .*got "central"$/],
    ['controllerServer: sluice-controller:10351', /controllerServer: "sluice-controller:10351" is neither http nor https/],
    ['controllerServer: "not a url"', /controllerServer: "not a url" is not a URL/],
    ['controllerCAFile: ca.crt', /controllerCAFile: must be an absolute path/],
    ['- a\n- b', /must be a YAML mapping/],
    ['a: [', /not valid YAML/],
  ];
  for (const [text, re] of cases) t.throws(() => parseConfig(text, 'x.yaml', env), re, text);
  t.throws(() => parseConfig('datapath: kernel', 'x.yaml', env), ConfigError);
});
