/**
 * Choosing the host's iptables backend (as kube-proxy's image does) and `datapath: auto`, from
 * what the host shows; and the configuration keys that select them.
 */
import t from 'tap';
import { parseConfig } from '../../daemon/config.js';
import { chooseDatapath, explicitDatapathProblem } from '../../daemon/ovs/datapath.js';
import { backendCommands, chooseBackend, ruleCount } from '../../daemon/hostnet/iptables-backend.js';

const save = (chains: string[], rules: number) =>
  ['*mangle', ...chains.map((c) => `:${c} - [0:0]`), ...Array.from({ length: rules }, (_, i) => `-A PREROUTING -m comment --comment r${i} -j ACCEPT`), 'COMMIT'].join('\n');

t.test('the kubelet hint chain decides; else the backend holding more rules; nft on a tie', async (t) => {
  t.equal(ruleCount(save([], 3)), 3);
  t.match(chooseBackend({ legacy: save(['KUBE-IPTABLES-HINT'], 0), nft: save([], 50) }), { backend: 'legacy', why: /hint chain is in the legacy tables/ });
  t.match(chooseBackend({ legacy: save([], 50), nft: save(['KUBE-KUBELET-CANARY'], 0) }), { backend: 'nft', why: /hint chain is in the nft tables/ });
  t.match(chooseBackend({ legacy: save([], 12), nft: save([], 3) }), { backend: 'legacy', why: /12 legacy, 3 nft/ });
  t.match(chooseBackend({ legacy: save([], 3), nft: save([], 12) }), { backend: 'nft', why: /12 nft, 3 legacy/ });
  t.match(chooseBackend({ legacy: save([], 0), nft: save([], 0) }), { backend: 'nft', why: /0 each/ });
  t.match(chooseBackend({ nft: '' }), { backend: 'nft', why: /only iptables-nft/ });
  t.match(chooseBackend({ legacy: '' }), { backend: 'legacy', why: /only iptables-legacy/ });
  t.match(chooseBackend({}), { backend: undefined, why: /plain iptables/ });
  t.same(backendCommands('legacy'), { backend: 'legacy', iptables: 'iptables-legacy', save: 'iptables-legacy-save', restore: 'iptables-legacy-restore' });
});

t.test('datapath: auto follows the kernel module', async (t) => {
  t.equal(chooseDatapath({ loaded: true, loadable: true }).datapath, 'system');
  t.equal(chooseDatapath({ loaded: false, loadable: true }).datapath, 'system');
  t.equal(chooseDatapath({ loaded: false, loadable: false }).datapath, 'netdev');
  const cfg = (text: string, loadable: boolean) => parseConfig(text, 'agent.yaml', {}, () => ({ loaded: false, loadable }));
  t.match(cfg('datapath: auto', false), { datapath: 'netdev', datapathWhy: /no openvswitch kernel module/ });
  t.match(cfg('datapath: auto', true), { datapath: 'system', datapathWhy: /available/ });
  t.notOk('datapathWhy' in cfg('datapath: netdev', true), 'an explicit datapath is used as is');
  t.throws(() => cfg('datapath: kernel', true), /datapath: must be "system", "netdev" or "auto", got "kernel"/);
  t.match(cfg('', false), { datapath: 'netdev', datapathWhy: /no openvswitch kernel module/ }, 'auto is the default');
});

t.test('an explicit datapath: system on a node without the module is refused with the cause and the fix', async (t) => {
  const none = { loaded: false, loadable: false };
  t.match(explicitDatapathProblem('system', false, none), /datapath: system needs the openvswitch kernel module.*set datapath: auto .* or datapath: netdev/);
  t.equal(explicitDatapathProblem('system', false, { loaded: false, loadable: true }), undefined, 'a loadable module is enough (ovs-ctl loads it)');
  t.equal(explicitDatapathProblem('netdev', false, none), undefined);
  t.equal(explicitDatapathProblem('system', true, none), undefined, 'auto never chooses system without it');
});

t.test('iptablesBackend: auto by default, nft or legacy when set, anything else refused', async (t) => {
  t.equal(parseConfig('', 'a.yaml', {}).iptablesBackend, 'auto');
  t.equal(parseConfig('iptablesBackend: legacy', 'a.yaml', {}).iptablesBackend, 'legacy');
  t.throws(() => parseConfig('iptablesBackend: xtables', 'a.yaml', {}), /iptablesBackend: must be "auto", "nft" or "legacy", got "xtables"/);
});
