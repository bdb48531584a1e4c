#!/usr/bin/env bash
# Flow control's benchmarks (docs/benchmarks.md, "Flow control"), RUNS times
# each, with their medians written by internal/tools/benchreport to OUT
# (default docs/benchmarks/flow_control.md):
#   - BenchmarkAdmission: ingest with admission on and off, same run;
#   - BenchmarkFlowOverloadRSS: peak RSS under the overload scenario, this
#     tree's binary and one built at BASE (default 87456d6, main before flow
#     control) in a temporary git worktree with -tags faultinject;
#   - BenchmarkFlowSinkRecovery: time from a sink's return to full
#     throughput, with and without hysteresis.
#
#   RUNS=5 RECORDS=200000 OVERLOAD_SECONDS=10 scripts/flowbench.sh
#   ONLY=Admission RUNS=9 scripts/flowbench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-5}"
BASE="${BASE:-87456d6}"
OUT="${OUT:-docs/benchmarks/flow_control.md}"
export WEIR_BENCH_RECORDS="${RECORDS:-200000}" WEIR_OVERLOAD_SECONDS="${OVERLOAD_SECONDS:-10}"
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/src" 2>/dev/null || true; rm -rf "$tmp"' EXIT
if [[ "${ONLY:-}" == "" || "${ONLY:-}" == *OverloadRSS* ]]; then
	git worktree add --detach "$tmp/src" "$BASE" >/dev/null
	(cd "$tmp/src" && go build -tags faultinject -o "$tmp/weir-base" ./cmd/weir)
	export WEIR_BASE_BIN="$tmp/weir-base"
fi
go test -run '^$' -bench "${ONLY:-^Benchmark(Admission|FlowOverloadRSS|FlowSinkRecovery)\$}" -benchtime 1x -count "$RUNS" -timeout 90m \
	./internal/systest | tee "$tmp/bench.out"
mkdir -p "$(dirname "$OUT")"
go run ./internal/tools/benchreport -in "$tmp/bench.out" -out "$OUT" \
	-command "RUNS=$RUNS RECORDS=$WEIR_BENCH_RECORDS OVERLOAD_SECONDS=$WEIR_OVERLOAD_SECONDS BASE=$BASE${ONLY:+ ONLY=$ONLY} scripts/flowbench.sh"
cp "$tmp/bench.out" "${OUT%.md}.bench"
echo "wrote $OUT"
