#!/usr/bin/env bash
# Runs weir's end-to-end benchmarks several times and writes the medians to
# docs/benchmarks/latest.md, appending a row to docs/benchmarks/history.md.
#   RUNS=5 RECORDS=1000000 scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-5}"
export WEIR_BENCH_RECORDS="${RECORDS:-1000000}"
mkdir -p docs/benchmarks
out=$(mktemp)
go test -run '^$' -bench "${BENCH:-.}" -benchtime 1x -count "$RUNS" -timeout 60m ./internal/systest | tee "$out"
go run ./internal/tools/benchreport -in "$out" -out docs/benchmarks/latest.md -history docs/benchmarks/history.md \
	-command "RUNS=$RUNS RECORDS=$WEIR_BENCH_RECORDS scripts/bench.sh"
rm -f "$out"
echo "wrote docs/benchmarks/latest.md"
