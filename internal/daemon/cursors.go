package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"

	"github.com/weir-io/weir/internal/config"
	"github.com/weir-io/weir/internal/engine"
	"github.com/weir-io/weir/source"
)

// cursorStore is a place store-managed sources keep their cursors in.
type cursorStore interface {
	source.CursorStore
	Remove(ctx context.Context, src string) error
	Where() string
}

// offsetCursors is the offset store beside raw as a cursorStore.
type offsetCursors struct{ *engine.OffsetStore }

func (o offsetCursors) Remove(ctx context.Context, src string) error {
	return o.RemoveCursor(ctx, src)
}

// openCursors opens where the store-managed sources named keep their
// cursors — beside what makes their records durable, whatever the
// [[secondary]] tables — and moves into it any cursor an earlier weir
// left in the other place (adoptCursors):
//
//   - gate = "buffer": <data_dir>/source-cursors, next to the write-ahead
//     buffer;
//   - gate = "raw": the offset store beside the [sink] (offsets, the raw
//     store when there are secondaries, or opened alone: the file in its
//     directory, the Postgres offsets table); <data_dir>/source-cursors
//     for a [sink] kind without one, which can never have secondaries.
//
// A source that is its own raw keeps its cursor in its own offset store
// (runOriginNode), not here. Earlier versions kept the cursors in the
// offset store exactly when there were secondaries, which is where the
// freshest copy is when both places hold one.
func openCursors(ctx context.Context, cfg *config.Config, k kinds, offsets *engine.OffsetStore, names []string, log *slog.Logger) (source.CursorStore, error) {
	dataDir, err := engine.OpenFileCursorStore(k.fs, cfg.DataDir, engine.DefaultCursorFile)
	if err != nil {
		return nil, fmt.Errorf("open source cursor store: %w", err)
	}
	if offsets == nil && cfg.Gate == "raw" {
		if offsets, err = k.openRawStore(ctx, log); err != nil {
			return nil, fmt.Errorf("open the offset store beside the [sink] for the source cursors: %w", err)
		}
	}
	if offsets == nil {
		return dataDir, nil // no other place to look: earlier versions used this one too
	}
	var home, other cursorStore = dataDir, offsetCursors{offsets}
	otherIsLegacy := len(cfg.Secondaries) > 0 // earlier versions: the offset store with secondaries
	if cfg.Gate == "raw" {
		home, other = other, home
		otherIsLegacy = !otherIsLegacy
	}
	if err := adoptCursors(ctx, names, home, other, otherIsLegacy, log); err != nil {
		return nil, err
	}
	log.Info("source cursors", "store", home.Where())
	return home, nil
}

// adoptCursors makes home hold the cursor of each source named that other
// holds, then removes it from other: saved in home first, so a crash in
// between leaves the same cursor in both, and the next start keeps it.
// When both hold different cursors — only an earlier weir leaves that,
// after a [[secondary]] was added or removed — the one where that version
// kept it with this topology is the newer: other's when otherIsLegacy.
func adoptCursors(ctx context.Context, names []string, home, other cursorStore, otherIsLegacy bool, log *slog.Logger) error {
	for _, name := range names {
		old, err := other.Load(ctx, name)
		if err != nil {
			return fmt.Errorf("source %q: read its cursor in %s: %w", name, other.Where(), err)
		}
		if old == nil {
			continue
		}
		cur, err := home.Load(ctx, name)
		if err != nil {
			return fmt.Errorf("source %q: read its cursor in %s: %w", name, home.Where(), err)
		}
		l := log.With("source", name, "from", other.Where(), "to", home.Where())
		switch {
		case cur == nil:
			l.Warn("source cursor moved to where it now lives (left by an earlier version with another topology)")
		case bytes.Equal(cur, old):
			l.Info("source cursor held in both places (a move cut short); removing the old copy")
			old = nil
		case otherIsLegacy:
			l.Warn("source cursor held in both places, differently; keeping the one the earlier version used with this topology")
		default:
			l.Warn("source cursor held in both places, differently; keeping the one in its store")
			old = nil
		}
		if old != nil {
			if err := home.Save(ctx, name, old); err != nil {
				return fmt.Errorf("source %q: move its cursor to %s: %w", name, home.Where(), err)
			}
		}
		if err := other.Remove(ctx, name); err != nil {
			return fmt.Errorf("source %q: remove its old cursor from %s (the cursor is already in %s): %w", name, other.Where(), home.Where(), err)
		}
	}
	return nil
}
