package daemon

import (
	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/vfs"
)

// bufferGateQuarantine is the quarantine directory, under data_dir's
// quarantine directory, of the records the write-ahead buffer cannot hold
// (over max_frame_bytes, or key and headers over wab.MaxMetaBytes).
//
// No [[secondary]] may take it as its quarantine_dir (config refuses the
// name "buffer" while quarantine_dir is unset).
const bufferGateQuarantine = config.BufferGateQuarantine

// bufferGateOptions configure the gate the [[source]]s write through when
// there is a write-ahead buffer. A record the buffer cannot hold is written to
// <data_dir>/quarantine/buffer (reason code oversize, stage gate; bounded
// by dead_letter_max_bytes) before the rest of the source's write, so the
// source's position may pass it instead of retrying it forever; when the
// lane is full or failing, the write fails and the source retries.
func bufferGateOptions(cfg *config.Config, fs vfs.FS, obs engine.GateObserver) engine.GateOptions {
	qdir := cfg.GateQuarantineDir(bufferGateQuarantine)
	return engine.GateOptions{
		MaxRecordBytes: cfg.MaxFrameBytes, Name: bufferGateQuarantine, Observer: obs,
		Quarantine: quarantine.NewOnDemand(quarantine.Options{FS: fs, Dir: qdir, MaxBytes: cfg.DeadLetterMaxBytes}),
	}
}
