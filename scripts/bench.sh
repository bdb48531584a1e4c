#!/usr/bin/env bash
# Runs weir's benchmarks several times and writes the medians to
# docs/benchmarks/latest.md, appending a row to docs/benchmarks/history.md:
# the end-to-end benchmarks of internal/systest (ingest, the disk baseline,
# Kafka → raw → Postgres secondary with file and Postgres raw), and, with
# SINKS=1 (the default), the sink benchmarks against their bare clients
# (internal/sink/pgsink, mysqlsink, kafkasink; they need the loopback
# Postgres and MariaDB).
#   RUNS=5 RECORDS=1000000 scripts/bench.sh
#   SINKS=0 BENCH=KafkaToPostgres RECORDS=100000 scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-5}"
SINKS="${SINKS:-1}"
export WEIR_BENCH_RECORDS="${RECORDS:-1000000}"
mkdir -p docs/benchmarks
out=$(mktemp)
go test -run '^$' -bench "${BENCH:-.}" -benchtime 1x -count "$RUNS" -timeout 60m ./internal/systest | tee "$out"
if [ "$SINKS" = 1 ]; then
	go test -run '^$' -bench . -benchtime 1x -count "$RUNS" -timeout 60m \
		./internal/sink/pgsink ./internal/sink/mysqlsink ./internal/sink/kafkasink | tee -a "$out"
fi
go run ./internal/tools/benchreport -in "$out" -out docs/benchmarks/latest.md -history docs/benchmarks/history.md \
	-command "RUNS=$RUNS RECORDS=$WEIR_BENCH_RECORDS SINKS=$SINKS BENCH=${BENCH:-.} scripts/bench.sh"
rm -f "$out"
echo "wrote docs/benchmarks/latest.md"
