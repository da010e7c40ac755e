#!/usr/bin/env bash
# Runs the whole suite: pure tests in parallel; then lab tests two files at a time (each file
# names its own labs and namespaces, and most of a lab test's time is spent waiting for packets
# and timeouts, not on the CPU); then, one at a time, the lab files whose first line says
# "// test-schedule: exclusive: <why>" (podman builds, or figures that a second lab's load would
# skew). Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
rc=0
run() { npx tap --reporter=tap "$@" 2>&1 | tee -a "$out"; local r=${PIPESTATUS[0]}; [ "$r" = 0 ] || rc=$r; }
if [ $# -gt 0 ]; then
  run "$@"
else
  phase() { phases+="$(printf '%8ss  %s' "$((SECONDS - t0))" "$1")"$'\n'; t0=$SECONDS; }
  phases=''
  t0=$SECONDS
  run -j2 'test/unit/**/*.test.ts'
  phase 'unit files (two at a time)'
  mapfile -t exclusive < <(grep -l '^// test-schedule: exclusive: ' test/lab/*.test.ts)
  mapfile -t shared < <(grep -L '^// test-schedule: exclusive: ' test/lab/*.test.ts)
  run -j2 "${shared[@]}"
  phase 'lab files (two at a time)'
  run -j1 "${exclusive[@]}"
  phase 'exclusive lab files (one at a time)'
  printf '\nTime per phase:\n%s' "$phases"
fi
node -e '
const txt = require("fs").readFileSync(process.argv[1], "utf8");
let pass = 0, fail = 0;
for (const m of txt.matchAll(/^# \{ (total: .*) \}$/gm)) {
  const o = Object.fromEntries(m[1].split(", ").map((s) => s.split(": ")).map(([k, v]) => [k, +v]));
  pass += o.pass ?? 0; fail += o.fail ?? 0;
}
// Every failing assertion again, with the file and subtests around it and the start of its
// diagnostics, so that the end of a long log says what failed without a search through it.
const lines = txt.split("\n");
const names = [];
const childFailed = [];
const failures = [];
for (let i = 0; i < lines.length; i++) {
  const line = lines[i];
  const sub = /^( *)# Subtest: (.*)$/.exec(line);
  if (sub) { const d = sub[1].length / 4; names[d] = sub[2]; names.length = d + 1; childFailed[d + 1] = false; continue; }
  const no = /^( *)not ok \d+ - (.*?)(?: # time=.*)?$/.exec(line);
  if (!no) continue;
  const d = no[1].length / 4;
  const leaf = !childFailed[d + 1];
  childFailed[d + 1] = false;
  childFailed[d] = true;
  if (!leaf) continue;
  const diag = [];
  if (lines[i + 1]?.trim() === "---") {
    for (let j = i + 2; j < lines.length && lines[j].trim() !== "..." && diag.length < 25; j++) diag.push(lines[j]);
  }
  failures.push([...names.slice(0, d), no[2]].map((n, k) => "  ".repeat(k) + n).join("\n") + (diag.length ? "\n" + diag.join("\n") : ""));
}
if (failures.length) console.log(`\nFailed assertions (${failures.length}):\n\n` + failures.join("\n\n") + "\n");
// Each file'"'"'s time, longest first: where the run'"'"'s length goes.
const files = [...txt.matchAll(/^(ok|not ok) \d+ - (\S+\.test\.ts)(?: # time=([0-9.]+)ms)?/gm)].map((m) => [m[2], Number(m[3] ?? 0) / 1000, m[1]]);
files.sort((a, b) => b[1] - a[1]);
if (files.length) console.log("\nTime per test file (s):\n" + files.map(([f, s, r]) => `${s.toFixed(1).padStart(8)}  ${f}${r === "ok" ? "" : "  (failed)"}`).join("\n") + "\n");
console.log(`${pass} passed, ${fail} failed`);' "$out"
rm -f "$out"
exit $rc
