#!/usr/bin/env bash
# The differential property test (test/unit/policy-reference.test.ts: the engine against a separately
# written reference evaluator) with more random policy sets than the unit suite's fixed 150 per part.
# usage: npm run differential -- [SETS_PER_PART (default 2000)] [SEED (default: a new one, printed)]
set -euo pipefail
cd "$(dirname "$0")/.."
sets=${1:-2000}
seed=${2:-$(( (RANDOM << 15) | RANDOM ))}
echo "differential: ${sets} policy sets per part, seed ${seed} (rerun: npm run differential -- ${sets} ${seed})"
SLUICE_REFERENCE_ITERATIONS=$sets SLUICE_REFERENCE_SEED=$seed exec bash scripts/test.sh test/unit/policy-reference.test.ts
