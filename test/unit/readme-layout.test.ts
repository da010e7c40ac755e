/**
 * The README's "Repository layout" table names every folder of daemon/ and lab/ (and the
 * top-level ones), so the map a newcomer reads first cannot drift from the tree.
 */
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const section = readme.slice(readme.indexOf('## Repository layout'));
const named = new Set([...section.matchAll(/`([a-z0-9/_-]+\/)`/g)].map((m) => m[1]!));

const folders = (dir: string) => readdirSync(join(ROOT, dir)).filter((f) => statSync(join(ROOT, dir, f)).isDirectory()).map((f) => `${dir}/${f}/`);

t.ok(section.startsWith('## Repository layout'), 'the README has its layout table');
for (const dir of [...['cni', 'daemon', 'install', 'lab', 'bench', 'examples'].map((d) => `${d}/`), ...folders('daemon'), ...folders('lab')]) {
  t.ok(named.has(dir), `the layout table names ${dir}`);
}
