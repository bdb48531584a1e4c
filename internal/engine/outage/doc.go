// Package outage holds the fan-out's integration tests against a real
// PostgreSQL secondary that is cut off and restored while batches keep
// flowing. It has no code of its own.
package outage
