/**
 * The import graph, type-only imports included (the linter's cycle rule skips those): no circle
 * anywhere in cni/, install/, daemon/ and lab/, and the layers point one way — the pure flow code
 * (daemon/flows/) never imports the Open vSwitch adapters (daemon/ovs/), which build on it.
 */
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function files(dir: string): string[] {
  const out: string[] = [];
  for (const f of readdirSync(dir)) {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) out.push(...files(p));
    else if (f.endsWith('.ts') && !f.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

const all = ['cni', 'install', 'daemon', 'lab'].flatMap((d) => files(join(ROOT, d)));
const known = new Set(all);
const graph = new Map<string, string[]>();
for (const f of all) {
  const text = readFileSync(f, 'utf8');
  // Static imports and re-exports, and `import('…')` (a type expression or a dynamic import).
  const specifiers = [...text.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s+'(\.{1,2}\/[^']+)'/gms), ...text.matchAll(/\bimport\(\s*'(\.{1,2}\/[^']+)'\s*\)/g)];
  const deps = specifiers
    .map((m) => resolve(dirname(f), m[1]!.replace(/\.js$/, '.ts')))
    .filter((p) => known.has(p));
  graph.set(f, [...new Set(deps)]);
}
const rel = (p: string) => relative(ROOT, p);

t.test('no import circle, type-only imports included', async (t) => {
  // Tarjan's strongly connected components.
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const circles: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        scc.push(rel(w));
      } while (w !== v);
      if (scc.length > 1) circles.push(scc.sort());
    }
  };
  for (const f of all) if (!idx.has(f)) visit(f);
  t.same(circles, [], `${all.length} files: no set of files importing each other in a circle`);
});

t.test('daemon/flows/ does not import daemon/ovs/', async (t) => {
  const bad = [...graph].flatMap(([f, deps]) => (rel(f).startsWith('daemon/flows/') ? deps.filter((d) => rel(d).startsWith('daemon/ovs/')).map((d) => `${rel(f)} -> ${rel(d)}`) : []));
  t.same(bad, [], 'flows is the pure layer the OVS adapters build on');
});
