// The linter over the whole repository (biome.json: the recommended rules, no import cycles, no
// floating promises): every diagnostic is a failure, printed with its file and line.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..');
const biome = join(root, 'node_modules', '.bin', 'biome');
const r = spawnSync(biome, ['lint', '--error-on-warnings', '--max-diagnostics=200', '--colors=off'], { cwd: root, encoding: 'utf8' });
if (r.status !== 0) t.comment(`${r.stdout}\n${r.stderr}`);
t.equal(r.status, 0, 'biome lint: no diagnostics');
t.match(r.stdout + r.stderr, /Checked \d+ files/, 'it checked the repository');
