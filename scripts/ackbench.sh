#!/usr/bin/env bash
# weir's ack path against Redis with `appendonly yes` and `appendfsync always`
# at the same pipeline depth, in one run, next to a bare fdatasync loop
# (BenchmarkAckDepth in internal/systest; it starts a private redis-server on
# a spare loopback port with its data in a temporary directory). Writes the
# medians and same-run ratios to docs/benchmarks/ack_depth.md.
#
#   RUNS=5 RECORDS=500000 scripts/ackbench.sh
#
# With PROFILE=dir it instead takes, at each depth, a CPU profile and a
# one-second scheduler trace of the daemon under load (dir/<setting>.cpu.pprof,
# dir/<setting>.trace) and writes a summary of each (top CPU costs, the
# scheduler-latency and syscall-blocking profiles from the trace) to
# dir/summary.txt:
#
#   PROFILE=/tmp/ackprof scripts/ackbench.sh
#
# ONLY=substring limits either mode to the settings whose name contains it;
# DAEMON_ARGS adds flags to every daemon (experiments: --shards 1, ...);
# BIN=path runs a prebuilt weir binary instead of this tree's (a version
# before a change), OUT=file writes the report elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || {
	echo "redis-server and redis-benchmark are needed" >&2
	exit 1
}
export WEIR_BENCH_RECORDS="${RECORDS:-500000}" WEIR_ACK_ONLY="${ONLY:-}" WEIR_ACK_DAEMON_ARGS="${DAEMON_ARGS:-}" WEIR_BIN="${BIN:-}"
if [[ -n "${PROFILE:-}" ]]; then
	mkdir -p "$PROFILE"
	WEIR_ACK_PROFILE="$PROFILE" WEIR_ACK_PROFILE_SECONDS="${SECONDS_PER_PROFILE:-4}" \
		go test -run '^$' -bench AckDepth -benchtime 1x -count 1 -timeout 30m ./internal/systest | tee "$PROFILE/bench.out"
	{
		for p in "$PROFILE"/*.cpu.pprof; do
			base="${p%.cpu.pprof}"
			echo "=== $(basename "$base"): CPU, by function (flat)"
			go tool pprof -top -nodecount=25 "$p" 2>/dev/null | sed -n '4,31p'
			echo "=== $(basename "$base"): CPU, cumulative"
			go tool pprof -top -cum -nodecount=40 "$p" 2>/dev/null | sed -n '6,46p'
			go tool trace -pprof=sched "$base.trace" >"$base.sched.pprof" 2>/dev/null || true
			go tool trace -pprof=syscall "$base.trace" >"$base.syscall.pprof" 2>/dev/null || true
			echo "=== $(basename "$base"): scheduler latency (trace), cumulative"
			go tool pprof -top -cum -nodecount=15 "$base.sched.pprof" 2>/dev/null | sed -n '6,21p'
			echo "=== $(basename "$base"): syscall blocking (trace), cumulative"
			go tool pprof -top -cum -nodecount=25 "$base.syscall.pprof" 2>/dev/null | sed -n '6,31p'
		done
	} >"$PROFILE/summary.txt"
	echo "wrote $PROFILE/summary.txt"
	exit 0
fi
RUNS="${RUNS:-5}"
OUT="${OUT:-docs/benchmarks/ack_depth.md}"
mkdir -p "$(dirname "$OUT")"
out=$(mktemp)
go test -run '^$' -bench AckDepth -benchtime 1x -count "$RUNS" -timeout 60m ./internal/systest | tee "$out"
cmd="RUNS=$RUNS RECORDS=$WEIR_BENCH_RECORDS"
[[ -n "$WEIR_ACK_ONLY" ]] && cmd+=" ONLY=$WEIR_ACK_ONLY"
[[ -n "$WEIR_ACK_DAEMON_ARGS" ]] && cmd+=" DAEMON_ARGS='$WEIR_ACK_DAEMON_ARGS'"
[[ -n "$WEIR_BIN" ]] && cmd+=" BIN=$WEIR_BIN"
go run ./internal/tools/benchreport -ack -in "$out" -out "$OUT" -command "$cmd scripts/ackbench.sh"
grep '^BENCH: ' "$out" >"${OUT%.md}.bench"
rm -f "$out"
echo "wrote $OUT"
