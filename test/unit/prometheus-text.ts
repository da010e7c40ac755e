/** Reading Prometheus text exposition in tests, as a scraper does (label order does not matter). */

/**
 * The value of the sample `name` whose labels are exactly `labels`, or undefined when there is no
 * such sample.
 */
export function sampleValue(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    const keys = Object.keys(got);
    if (keys.length === Object.keys(labels).length && keys.every((k) => Object.hasOwn(labels, k) && got[k] === labels[k])) return Number(m[3]);
  }
  return undefined;
}
