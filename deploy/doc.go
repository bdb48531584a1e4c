// Package deploy holds what operators load next to weir, not Go code: the
// Grafana dashboard (grafana/weir.json) and the Prometheus alert rules
// with their unit tests (prometheus/weir-alerts.yml,
// prometheus/weir-alerts_test.yml). Its tests check them: the rules with
// Prometheus's own promtool, every PromQL expression with Prometheus's
// parser, and every metric they name against the daemon's registry and
// docs/monitoring.md. docs/monitoring.md says how to load them.
package deploy
