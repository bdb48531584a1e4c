package pgquarantine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/sink/recjson"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
)

// Read reads the rows of the quarantine table as lane records, those of
// the lane sinkName only when it is not empty, oldest first (by
// first_seen, then quarantined_at). It opens its own connection and
// creates nothing: a missing table is an error.
func Read(ctx context.Context, o Options, sinkName string) ([]lane.Rejected, error) {
	ident, err := o.resolve()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, o.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgquarantine: connect: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT sink, reason_code, stage, component, rule, error, payload, record_id,
	source, origin_pos, raw_position, record_key, headers, event_time, first_seen, attempts, found_by, quarantined_at
FROM %s WHERE $1 = '' OR sink = $1 ORDER BY first_seen NULLS LAST, quarantined_at, record_id`, ident.Sanitize()), sinkName)
	if err != nil {
		return nil, fmt.Errorf("pgquarantine: read %s: %w", ident.Sanitize(), err)
	}
	var out []lane.Rejected
	for rows.Next() {
		var (
			r                   lane.Rejected
			code, stage, found  string
			origin              pgtype.Text
			pos                 int64
			headers             []byte
			event, first, quard pgtype.Timestamptz
			attempts            int32
			id                  [16]byte
		)
		rj := &r.Reject
		if err := rows.Scan(&r.Sink, &code, &stage, &rj.Component, &rj.Rule, &rj.Error, &r.Record.Payload, &id,
			&r.Record.Source, &origin, &pos, &r.Record.Key, &headers, &event, &first, &attempts, &found, &quard); err != nil {
			return nil, fmt.Errorf("pgquarantine: read %s: %w", ident.Sanitize(), err)
		}
		r.Record.ID = sink.RecordID(id)
		if rj.Code, err = record.ParseCode(code); err != nil {
			return nil, fmt.Errorf("pgquarantine: %w", err)
		}
		rj.Stage, rj.Attempts = record.Stage(stage), int(attempts)
		r.OriginPos, r.Pos, r.Recovery = origin.String, uint64(pos), found == "recovery"
		if headers != nil {
			if r.Record.Headers, err = recjson.ParseHeaders(headers); err != nil {
				return nil, fmt.Errorf("pgquarantine: record %s: %w", r.Record.ID, err)
			}
		}
		if event.Valid {
			r.Record.EventTime = event.Time
		}
		switch {
		case first.Valid:
			rj.FirstSeen = first.Time.UnixNano()
		case quard.Valid:
			rj.FirstSeen = quard.Time.UnixNano()
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgquarantine: read %s: %w", ident.Sanitize(), err)
	}
	return out, nil
}
