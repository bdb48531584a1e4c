// Package config loads weir's configuration from four layers — command-line
// flags over WEIR_* environment variables over a TOML file over built-in
// defaults — each read as a partial configuration, merged, then validated.
package config

import "time"

// Config is the daemon's validated configuration. Paths are absolute and
// clean.
type Config struct {
	DataDir    string // data_dir
	SocketPath string // socket_path; default <data_dir>/weir.sock
	WABDir     string // wab_dir; default <data_dir>/wab

	Shards           int           // shards
	MaxConnections   int           // max_connections
	MaxFrameBytes    int           // max_frame_bytes
	FrameReadTimeout time.Duration // frame_read_timeout
	IdleTimeout      time.Duration // idle_timeout
	WriteTimeout     time.Duration // write_timeout
	ConnMaxInflight  int           // conn_max_inflight (records)
	QueueCapacity    int           // queue_capacity (per shard)
	QueueTimeout     time.Duration // queue_timeout
	ShutdownTimeout  time.Duration // shutdown_timeout

	BatchMaxRecords  int           // batch_max_records
	BatchDeadline    time.Duration // batch_deadline
	SegmentMaxBytes  int64         // segment_max_bytes
	SegmentMaxAge    time.Duration // segment_max_age
	PreallocateBytes int64         // segment_preallocate_bytes

	DrainRetryBase time.Duration // drain_retry_base
	DrainRetryMax  time.Duration // drain_retry_max

	Sink SinkConfig // [sink]

	LogLevel  string // log_level: debug|info|warn|error
	LogFormat string // log_format: text|json
}

// SinkConfig chooses and configures the sink the drain delivers to.
type SinkConfig struct {
	Type string     // sink.type: "file"
	File FileConfig // [sink.file]
}

// FileConfig configures the NDJSON file sink.
type FileConfig struct {
	Dir          string        // sink.file.dir; default <data_dir>/out
	MaxBytes     int64         // sink.file.max_bytes
	MaxAge       time.Duration // sink.file.max_age
	BatchRecords int           // sink.file.batch_records (MaxBatchSize)
}
