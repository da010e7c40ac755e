/**
 * `s` as one flat string. A string built by concatenation is kept by V8 as the tree of its parts
 * (a 20–32-byte node per join, its parts kept alive, and a flat copy beside it once something reads
 * it whole); a string kept long, tens of thousands of times (flow texts, member keys), so took two
 * to three times the memory of its text. A property key is always flat (V8 internalizes it; the
 * string table lets it go with its last user), whatever its engine tier, where reading a character
 * flattens only in some.
 */
export function flat(s: string): string {
  for (const k in { [s]: 0 }) return k;
  return s;
}
