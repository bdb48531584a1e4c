package daemon

import (
	"context"
	"time"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/internal/quarantine"
	"github.com/weir-io/weir/internal/tap"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/wab"
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
//
// Its records are shown at the tap points "gate" and
// "quarantine:buffer" of taps (weir tap).
func bufferGateOptions(cfg *config.Config, fs vfs.FS, obs engine.GateObserver, taps *tap.Hub) engine.GateOptions {
	qdir := cfg.GateQuarantineDir(bufferGateQuarantine)
	return engine.GateOptions{
		MaxRecordBytes: cfg.MaxFrameBytes, Name: bufferGateQuarantine, Observer: obs,
		Quarantine: quarantine.NewOnDemand(quarantine.Options{FS: fs, Dir: qdir, MaxBytes: cfg.DeadLetterMaxBytes}),
		Tap:        taps.Point(gateTap), QuarantineTap: taps.Point(quarantineTap(bufferGateQuarantine)),
	}
}

// The tap points (weir tap, docs/operations/tap.md): the gate, each
// source, each secondary, each quarantine lane.
const gateTap = "gate"

func sourceTap(name string) string     { return "source:" + name }
func secondaryTap(name string) string  { return "secondary:" + name }
func quarantineTap(lane string) string { return "quarantine:" + lane }

// tappedBackend is the write-ahead buffer gate as a producer listener
// writes through it: its records are also shown at the listener's
// source tap point before they enter the gate.
type tappedBackend struct {
	*engine.WABGate
	p *tap.Point
}

func (b tappedBackend) Submit(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	if b.p.Active() {
		b.p.OfferBuffered(req.Payloads, req.Metas)
	}
	return b.WABGate.Submit(ctx, shard, req, wait)
}

func (b tappedBackend) SubmitInline(ctx context.Context, shard int, req *wab.Request, wait time.Duration) error {
	if b.p.Active() {
		b.p.OfferBuffered(req.Payloads, req.Metas)
	}
	return b.WABGate.SubmitInline(ctx, shard, req, wait)
}

func (b tappedBackend) SubmitBatch(ctx context.Context, shard int, reqs []*wab.Request, wait time.Duration) error {
	if b.p.Active() {
		for _, req := range reqs {
			b.p.OfferBuffered(req.Payloads, req.Metas)
		}
	}
	return b.WABGate.SubmitBatch(ctx, shard, reqs, wait)
}
