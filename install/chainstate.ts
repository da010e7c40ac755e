/**
 * Which CNI configuration the container runtime uses, and what sluice must write so that it chains
 * sluice (pure). The runtime (containerd's CRI plugin and CRI-O, through libcni) lists the
 * configuration directory's *.conf, *.conflist and *.json files, sorts the names, and uses the first
 * one that loads as a network configuration with at least one plugin; files that do not load are
 * skipped. So a primary that rewrites its file, or a new file that sorts first, changes what new
 * Pods get.
 */
import { chainSluice, ConfListError, toConfList, type ConfList } from './conflist.js';

export interface ConfFile {
  name: string;
  text: string;
}

export const CONF_EXTENSIONS = /\.(conf|conflist|json)$/;

/** The file the runtime would use, and the files it would skip before it (with why). */
export function runtimeConfig(files: readonly ConfFile[]): { file?: ConfFile; list?: ConfList; skipped: { name: string; why: string }[] } {
  const skipped: { name: string; why: string }[] = [];
  const sorted = files.filter((f) => CONF_EXTENSIONS.test(f.name)).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const f of sorted) {
    let doc: unknown;
    try {
      doc = JSON.parse(f.text);
    } catch (err) {
      skipped.push({ name: f.name, why: `not valid JSON (${(err as Error).message})` });
      continue;
    }
    try {
      // A .conflist must have "plugins"; a .conf/.json is one plugin (libcni's ConfListFromConf).
      if (f.name.endsWith('.conflist') && !Array.isArray((doc as { plugins?: unknown } | null)?.plugins)) throw new ConfListError(`${f.name}: a .conflist without "plugins"`);
      return { file: f, list: toConfList(doc, f.name), skipped };
    } catch (err) {
      skipped.push({ name: f.name, why: (err as Error).message });
    }
  }
  return { skipped };
}

export const confListText = (list: ConfList): string => JSON.stringify(list, null, 2) + '\n';

/** JSON with object keys sorted: equal for documents that mean the same (key order is not meaning). */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : x));
}

export type ChainPlan =
  /** No usable configuration: the primary is not installed (yet). Nothing to do. */
  | { action: 'none'; why: string; skipped: { name: string; why: string }[] }
  /**
   * Files that sort first do not load: the runtime skips them today, but they are most likely a
   * primary's configuration being replaced or broken. Chaining into the next file could chain the
   * wrong network, so nothing is written until they are fixed or removed.
   */
  | { action: 'refuse'; why: string; skipped: { name: string; why: string }[] }
  /** The runtime's file already chains sluice. */
  | { action: 'keep'; file: string; skipped: { name: string; why: string }[] }
  /** Write `text` to `target` (the runtime's file, or its .conflist twin, then `remove` the .conf). */
  | { action: 'write'; file: string; target: string; text: string; remove?: string; skipped: { name: string; why: string }[] };

/**
 * What keeps sluice chained in `files` (pure): sluice right after the primary plugin, the primary's
 * other plugins and their order preserved (chainSluice). A single-plugin .conf/.json becomes a
 * .conflist of the same base name, which sorts right after it; the old file is removed so the new
 * one is the runtime's choice.
 */
export function planChain(files: readonly ConfFile[], sluiceEntry: Record<string, unknown> = {}): ChainPlan {
  const { file, list, skipped } = runtimeConfig(files);
  const unusable = skipped.map((s) => `${s.name}: ${s.why}`).join('; ');
  if (!file || !list) {
    if (skipped.length) return { action: 'refuse', why: `no CNI configuration the runtime can use (${unusable})`, skipped };
    return { action: 'none', why: 'no CNI configuration: install the primary CNI first (sluice chains after it)', skipped };
  }
  if (skipped.length) return { action: 'refuse', why: `${unusable} — sorts before ${file.name}, which the runtime uses instead; fix or remove it`, skipped };
  let chained: ConfList;
  try {
    chained = chainSluice(list, sluiceEntry);
  } catch (err) {
    return { action: 'refuse', why: `${file.name}: ${(err as Error).message}`, skipped };
  }
  if (canonical(chained) === canonical(list)) return { action: 'keep', file: file.name, skipped };
  const target = file.name.endsWith('.conflist') ? file.name : file.name.replace(CONF_EXTENSIONS, '.conflist');
  return {
    action: 'write', file: file.name, target, text: confListText(chained),
    ...(target !== file.name ? { remove: file.name } : {}),
    skipped,
  };
}
