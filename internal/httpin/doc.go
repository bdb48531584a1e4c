// Package httpin is the daemon's HTTP door: producers that speak HTTP —
// curl, a webhook, any language's standard client — push records with
// POST /v1/records and get a 2xx only once every record of the request is
// durable to the tier they asked for (docs/http.md).
//
// It keeps the socket's promise through the socket's path: each request
// becomes one wab.Request submitted to the write-ahead buffer's shards
// (server.Backend), and the answer is written from the request's Done. A
// request is accepted whole or refused whole. Its body is counted in the
// flow budget before it is read into memory (flow.Hold), flow control in
// Critical answers 429 with Retry-After, and an Idempotency-Key makes the
// records' ids those of an idempotent producer: (stream, key) names the
// producer, the record's index is its sequence number, so a retry is the
// same record to every sink.
//
// Files: ingress.go (the source, its listener and shutdown), routes.go
// (the routes and the handler's steps), body.go (reading a body, bounded,
// decompressed), decode.go (the body formats), ids.go (stored metadata and
// ids), problem.go (RFC 9457 answers), auth.go (bearer tokens), limits.go
// (options and their defaults).
package httpin
