import t from 'tap';
import { matchesSelector, selectorError } from '../../daemon/policy/labels.js';

t.test('empty selector matches everything', async (t) => {
  t.ok(matchesSelector({}, {}));
  t.ok(matchesSelector({}, { a: 'b' }));
});

t.test('matchLabels and expressions are ANDed', async (t) => {
  const sel = { matchLabels: { app: 'web' }, matchExpressions: [{ key: 'tier', operator: 'In' as const, values: ['fe', 'be'] }] };
  t.ok(matchesSelector(sel, { app: 'web', tier: 'fe' }));
  t.notOk(matchesSelector(sel, { app: 'web', tier: 'db' }));
  t.notOk(matchesSelector(sel, { app: 'api', tier: 'fe' }));
  t.notOk(matchesSelector(sel, { app: 'web' }));
});

t.test('NotIn matches a missing key, DoesNotExist rejects a present one', async (t) => {
  t.ok(matchesSelector({ matchExpressions: [{ key: 'x', operator: 'NotIn', values: ['1'] }] }, {}));
  t.notOk(matchesSelector({ matchExpressions: [{ key: 'x', operator: 'DoesNotExist' }] }, { x: '' }));
  t.ok(matchesSelector({ matchExpressions: [{ key: 'x', operator: 'Exists' }] }, { x: '' }));
});

t.test('invalid selectors are explained', async (t) => {
  t.match(selectorError({ matchExpressions: [{ key: 'a', operator: 'In' }] }), { field: 'matchExpressions[0].values', message: /must be specified when `operator` is 'In' or 'NotIn'/ });
  t.match(selectorError({ matchExpressions: [{ key: 'a', operator: 'Bogus' }] }), { field: 'matchExpressions[0].operator', message: /Unsupported value: "Bogus"/ });
  t.equal(selectorError({ matchLabels: { a: 'b' } }), undefined);
});
