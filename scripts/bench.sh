#!/usr/bin/env bash
# Runs every benchmark (bench/*.ts, compiled to dist/bench) and prints its figures.
# Pass names to run a subset: npm run bench -- policy cni-startup
set -uo pipefail
cd "$(dirname "$0")/.."
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in dist/bench/*.js; do names+=("$(basename "$f" .js)"); done
fi
rc=0
for n in "${names[@]}"; do
  echo "== bench/$n"
  # --expose-gc: benches that print memory collect garbage before reading the heap.
  node --expose-gc "dist/bench/$n.js" || { echo "bench/$n failed" >&2; rc=1; }
done
exit $rc
