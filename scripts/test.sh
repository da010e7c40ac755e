#!/usr/bin/env bash
# Runs the whole suite: pure tests in parallel, then root/lab tests one file at a time
# (they share the machine's network namespaces and OVS). Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
rc=0
run() { npx tap --reporter=tap "$@" 2>&1 | tee -a "$out"; local r=${PIPESTATUS[0]}; [ "$r" = 0 ] || rc=$r; }
if [ $# -gt 0 ]; then
  run "$@"
else
  run -j2 'test/unit/**/*.test.ts'
  run -j1 'test/lab/**/*.test.ts'
fi
node -e '
const txt = require("fs").readFileSync(process.argv[1], "utf8");
let pass = 0, fail = 0;
for (const m of txt.matchAll(/^# \{ (total: .*) \}$/gm)) {
  const o = Object.fromEntries(m[1].split(", ").map((s) => s.split(": ")).map(([k, v]) => [k, +v]));
  pass += o.pass ?? 0; fail += o.fail ?? 0;
}
console.log(`${pass} passed, ${fail} failed`);' "$out"
rm -f "$out"
exit $rc
