// After tsc: make the bin entry points executable.
import { chmodSync, existsSync, readFileSync } from 'node:fs';
const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
for (const file of Object.values(pkg.bin)) {
  if (existsSync(file)) chmodSync(file, 0o755);
}
