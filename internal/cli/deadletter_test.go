package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weir-io/weir/client"
	"github.com/weir-io/weir/internal/drain"
	"github.com/weir-io/weir/internal/lane"
	"github.com/weir-io/weir/internal/vfs"
	"github.com/weir-io/weir/record"
	"github.com/weir-io/weir/sink"
	"github.com/weir-io/weir/wab"
	"github.com/weir-io/weir/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pushServer is a daemon stand-in on a Unix socket that speaks wire
// version 2: it answers a Hello granting what was asked (as the daemon does
// on its Unix socket), acks every push and keeps the payloads, durability
// tiers and decoded metadata it was sent. With v1Only it refuses the Hello
// as a daemon that speaks only version 1 does.
type pushServer struct {
	path   string
	ln     net.Listener
	wg     sync.WaitGroup
	v1Only bool

	mu       sync.Mutex
	conns    int
	payloads []string
	tiers    []wire.Durability
	metas    map[string][]record.Meta // by payload, one per copy received
}

func newPushServer(t *testing.T) *pushServer { return startPushServer(t, false) }

func startPushServer(t *testing.T, v1Only bool) *pushServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "weircli") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &pushServer{path: filepath.Join(dir, "s.sock"), v1Only: v1Only, metas: map[string][]record.Meta{}}
	if s.ln, err = net.Listen("unix", s.path); err != nil {
		t.Fatal(err)
	}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() { s.ln.Close(); s.wg.Wait() })
	return s
}

func (s *pushServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns++
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *pushServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	d := wire.NewDecoder(c, 0)
	if s.v1Only {
		d.SetMaxVersion(wire.Version)
	}
	for {
		f, err := d.Next()
		var pe *wire.ProtocolError
		switch {
		case errors.As(err, &pe):
			c.Write(wire.AppendNackVersion(nil, max(pe.Version, wire.Version), pe.RequestID, pe.Code, pe.Reason))
			if pe.Fatal {
				return
			}
			continue
		case err != nil:
			return
		case f.Type == wire.TypeHello:
			c.Write(wire.AppendHelloAck(nil, wire.HelloAck{Version: wire.Version2, MaxVersion: wire.Version2,
				Flags: f.Hello.Flags & (wire.FlagIdempotent | wire.FlagReplay), MaxFrameBytes: wire.DefaultMaxFrameBytes,
				MaxMetaBytes: wire.MaxMetaBytes}))
			continue
		}
		if err := s.keep(&f.Push); err != nil {
			c.Write(wire.AppendNackVersion(nil, f.Version, f.RequestID, wire.CodeBadMeta, err.Error()))
			continue
		}
		if _, err := c.Write(wire.AppendAckVersion(nil, max(f.Version, wire.Version), f.RequestID, uint32(len(f.Payloads)))); err != nil {
			return
		}
	}
}

// keep records a push's payloads, tier and metadata.
func (s *pushServer) keep(p *wire.Push) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, pl := range p.Payloads {
		var m record.Meta
		if p.Metas != nil {
			var err error
			if m, err = record.Decode(bytes.Clone(p.Metas[i]), record.LegacyOrigin); err != nil {
				return err
			}
		}
		s.payloads = append(s.payloads, string(pl))
		s.tiers = append(s.tiers, p.Durability)
		s.metas[string(pl)] = append(s.metas[string(pl)], m)
	}
	return nil
}

func (s *pushServer) got() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.payloads)
	slices.Sort(out)
	return out, s.conns
}

// plantedIDs are the ids the planted dead letters were delivered under.
var plantedIDs = map[string]sink.RecordID{
	"v1-0": {10}, "v1-1": {11}, "a-decode": {20}, "b-refused": {21}, "c-oversize": {22},
}

// Times of the planted dead letters: the version-1 file was written at t0,
// the version-2 records were first rejected at t1, t2 and t3.
var (
	t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Hour)
	t2 = t0.Add(2 * time.Hour)
	t3 = t0.Add(3 * time.Hour)
)

// v1Meta is a dead-letter meta as drains before reason codes wrote it.
func v1Meta(id byte, index uint64, reason string) []byte {
	rid := sink.RecordID{id}
	b := append([]byte{1}, rid[:]...)
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint64(b, 5)
	b = binary.BigEndian.AppendUint64(b, index)
	b = binary.AppendUvarint(b, uint64(len(reason)))
	return append(b, reason...)
}

func v2Meta(id byte, code record.Code, seen time.Time, index uint64) *record.Meta {
	return &record.Meta{ID: sink.RecordID{id}, HasID: true, Source: "kafka:orders", OriginPos: "orders/0@7",
		Reject: &record.Rejection{Code: code, Stage: record.StageDrain, Component: "pg", Error: "refused as " + code.String(),
			Attempts: 3, FirstSeen: seen.UnixNano(), Shard: 1, Seq: 9, Index: index, HasLocation: true}}
}

// plantDeadLetters writes dl_00000001 (two version-1 records) and
// dl_00000002 (three version-2 records: decode, sink-refused, oversize) in
// a fresh WAB directory.
func plantDeadLetters(t *testing.T) string {
	t.Helper()
	wabDir := t.TempDir()
	dir := drain.DeadLetterDir(wabDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	v1 := []wab.Record{
		{Received: t0.UnixNano(), Payload: []byte("v1-0"), Meta: v1Meta(10, 0, "old reason")},
		{Received: t0.UnixNano(), Payload: []byte("v1-1"), Meta: v1Meta(11, 1, "old reason")},
	}
	keyed := v2Meta(20, record.CodeDecode, t1, 0)
	keyed.Key, keyed.EventTime = []byte("order-7"), t0.UnixNano()
	keyed.Headers = []sink.Header{{Key: "trace", Value: []byte("abc")}}
	v2 := []wab.Record{
		{Received: t1.UnixNano(), Payload: []byte("a-decode"), Meta: record.Encode(keyed)},
		{Received: t2.UnixNano(), Payload: []byte("b-refused"), Meta: record.Encode(v2Meta(21, record.CodeSinkRefused, t2, 1))},
		{Received: t3.UnixNano(), Payload: []byte("c-oversize"), Meta: record.Encode(v2Meta(22, record.CodeOversize, t3, 2))},
	}
	for i, recs := range [][]wab.Record{v1, v2} {
		seq := uint64(i + 1)
		h := wab.Header{Shard: wab.DeadLetterShard, Seq: seq, Created: t0.UnixNano()}
		if err := wab.WriteSealed(vfs.OS, filepath.Join(dir, drain.DeadLetterName(seq)), h, recs); err != nil {
			t.Fatal(err)
		}
	}
	return wabDir
}

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := deadletter(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestDeadletterListAndShow(t *testing.T) {
	wabDir := plantDeadLetters(t)
	out, _, code := run(t, "list", "--wab-dir", wabDir)
	for _, want := range []string{"dl_00000001.wab.sealed", "unknown:2", "-/-:2", "dl_00000002.wab.sealed",
		"decode:1,sink-refused:1,oversize:1", "drain/pg:3", "2026-03-01T03:00:00.000Z", "2 files, 5 records"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("list: exit %d, no %q in\n%s", code, want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 8 && f[0] == drain.DeadLetterName(2) && f[7] != "3" {
			t.Errorf("list: most attempts %s, want 3: %q", f[7], line)
		}
	}
	out, _, code = run(t, "show", "--wab-dir", wabDir, "--all")
	for _, want := range []string{
		`code=unknown stage=- component=- attempts=0 first_seen=2026-03-01T00:00:00.000Z`, `reason: old reason`,
		`source=kafka:orders origin=shard 1 seq 9 index 0 origin_pos=orders/0@7`,
		`code=decode stage=drain component=pg attempts=3 first_seen=2026-03-01T01:00:00.000Z`,
		`key: "order-7"`, `header: "trace"="abc"`, `event_time: 2026-03-01T00:00:00.000Z`, `payload: "c-oversize"`,
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("show: exit %d, no %q in\n%s", code, want, out)
		}
	}
	out, _, code = run(t, "show", "--wab-dir", wabDir, "--all", "--code", "oversize")
	if code != 0 || strings.Count(out, "payload:") != 1 || !strings.Contains(out, `"c-oversize"`) ||
		!strings.Contains(out, "dl_00000001.wab.sealed: 0 of 2 records") {
		t.Fatalf("show --code oversize: exit %d\n%s", code, out)
	}
}

func TestDeadletterReplayFilters(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
		left []string // dead-letter files after the replay
	}{
		{"all", []string{"--all"}, []string{"a-decode", "b-refused", "c-oversize", "v1-0", "v1-1"}, []string{"1", "2"}},
		{"codes", []string{"--all", "--code", "decode", "--code", "OVERSIZE"}, []string{"a-decode", "c-oversize"}, []string{"1", "2"}},
		{"since", []string{"--all", "--since", t2.Format(time.RFC3339)}, []string{"b-refused", "c-oversize"}, []string{"1", "2"}},
		{"until", []string{"--all", "--until", t2.Format(time.RFC3339)}, []string{"a-decode", "v1-0", "v1-1"}, []string{"1", "2"}},
		{"window", []string{"--all", "--since", "2026-03-01T00:30:00Z", "--until", "2026-03-01T02:30:00Z"}, []string{"a-decode", "b-refused"}, []string{"1", "2"}},
		{"remove whole file", []string{"--all", "--code", "unknown", "--remove"}, []string{"v1-0", "v1-1"}, []string{"2"}},
		{"remove keeps a partly replayed file", []string{"--code", "decode", "--remove", drain.DeadLetterName(2)}, []string{"a-decode"}, []string{"1", "2"}},
		{"remove all", []string{"--all", "--remove"}, []string{"a-decode", "b-refused", "c-oversize", "v1-0", "v1-1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wabDir := plantDeadLetters(t)
			srv := newPushServer(t)
			out, errOut, code := run(t, append([]string{"replay", "--wab-dir", wabDir, "--socket-path", srv.path}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			got, _ := srv.got()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("replayed %v, want %v", got, tc.want)
			}
			files, err := drain.ListDeadLetters(vfs.OS, wabDir)
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, f := range files {
				left = append(left, strings.TrimLeft(strings.TrimSuffix(strings.TrimPrefix(f.Name, "dl_"), ".wab.sealed"), "0"))
			}
			if !reflect.DeepEqual(left, tc.left) {
				t.Errorf("files left %v, want %v", left, tc.left)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			for _, p := range tc.want {
				if ms := srv.metas[p]; len(ms) != 1 || !ms[0].HasID || ms[0].ID != plantedIDs[p] || ms[0].Reject != nil || ms[0].HasProducer {
					t.Errorf("%s replayed with metadata %+v, want once under its id %v", p, ms, plantedIDs[p])
				}
			}
		})
	}
}

// --dry-run prints the selection and its count and neither connects nor
// removes anything.
func TestDeadletterReplayDryRun(t *testing.T) {
	wabDir := plantDeadLetters(t)
	srv := newPushServer(t)
	out, errOut, code := run(t, "replay", "--wab-dir", wabDir, "--socket-path", srv.path, "--dry-run", "--remove",
		"--all", "--code", "sink-refused", "--code", "unknown")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		`dl_00000001.wab.sealed #0 id=` + sink.RecordID{10}.String() + ` code=unknown first_seen=2026-03-01T00:00:00.000Z payload="v1-0"`,
		`dl_00000002.wab.sealed #1 id=` + sink.RecordID{21}.String() + ` code=sink-refused first_seen=2026-03-01T02:00:00.000Z payload="b-refused"`,
		"dl_00000001.wab.sealed would be removed", "dl_00000002.wab.sealed would be kept",
		"dry run: would replay 3 records from 2 files; nothing sent",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "a-decode") {
		t.Errorf("dry run lists a record outside the filter:\n%s", out)
	}
	if got, conns := srv.got(); conns != 0 || len(got) != 0 {
		t.Errorf("dry run connected %d times and sent %v", conns, got)
	}
	if files, _ := drain.ListDeadLetters(vfs.OS, wabDir); len(files) != 2 {
		t.Errorf("dry run left %d files, want 2", len(files))
	}
}

// sendReplay re-submits a record, Durable, under the identity it was
// dead-lettered with — id, source, origin position — with its key, headers
// and event time, and without its rejection or producer fields (which a
// producer may not send).
func TestSendReplay(t *testing.T) {
	srv := newPushServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialReplay(ctx, srv.path)
	if err != nil {
		t.Fatal(err)
	}
	dl := v2Meta(1, record.CodeDecode, t1, 0)
	dl.Key, dl.EventTime = []byte("k"), t0.UnixNano()
	dl.Headers = []sink.Header{{Key: "h", Value: []byte("1")}, {Key: "h", Value: []byte("2")}}
	dl.Producer, dl.Seq, dl.HasProducer = record.ProducerID{7}, 42, true // a version-2 producer's record
	plain := &record.Meta{ID: sink.RecordID{}, HasID: true, Source: drain.RecordSource,
		Reject: &record.Rejection{Code: record.CodeSinkRefused}} // a version-1 producer's record; an all-zero id is an id
	dls := []drain.DeadLetterRecord{{Payload: []byte("p"), Meta: *dl}, {Payload: []byte("q"), Meta: *plain}}
	recs := []lane.Rejected{dls[0].Rejected(0), dls[1].Rejected(0)}
	done := make(chan error, len(recs))
	for i := range recs {
		if err := sendReplay(ctx, c, &recs[i], func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range recs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	bad := (&drain.DeadLetterRecord{Payload: []byte("x"), MetaErr: record.ErrBadMeta}).Rejected(0)
	if err := sendReplay(ctx, c, &bad, func(error) { t.Error("done called for a refused record") }); !errors.Is(err, errNoIdentity) {
		t.Errorf("record with undecodable metadata: %v, want errNoIdentity", err)
	}
	noID := (&drain.DeadLetterRecord{Payload: []byte("y"), Meta: record.Meta{Reject: &record.Rejection{Code: record.CodeSinkRefused}}}).Rejected(0)
	if err := sendReplay(ctx, c, &noID, func(error) { t.Error("done called for a refused record") }); !errors.Is(err, errNoIdentity) {
		t.Errorf("record whose metadata holds no id: %v, want errNoIdentity", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if !reflect.DeepEqual(srv.payloads, []string{"p", "q"}) || srv.tiers[0] != client.Durable || srv.tiers[1] != client.Durable {
		t.Errorf("server got %q at %v", srv.payloads, srv.tiers)
	}
	want := map[string][]record.Meta{
		"p": {{ID: sink.RecordID{1}, HasID: true, Source: "kafka:orders", OriginPos: "orders/0@7",
			Key: []byte("k"), Headers: dl.Headers, EventTime: t0.UnixNano()}},
		"q": {{ID: sink.RecordID{}, HasID: true, Source: drain.RecordSource}},
	}
	if !reflect.DeepEqual(srv.metas, want) {
		t.Errorf("server got metadata\n%+v\nwant\n%+v", srv.metas, want)
	}
}

// A daemon that does not grant replay (one that speaks only wire version
// 1) gets nothing: the records could not keep their ids. Their files stay.
func TestDeadletterReplayNeedsReplayGrant(t *testing.T) {
	wabDir := plantDeadLetters(t)
	srv := startPushServer(t, true)
	out, errOut, code := run(t, "replay", "--wab-dir", wabDir, "--socket-path", srv.path, "--all", "--remove")
	if code != 1 || !strings.Contains(errOut, "did not grant replay") {
		t.Fatalf("exit %d, want 1 and a refusal\n%s\n%s", code, out, errOut)
	}
	if got, _ := srv.got(); len(got) != 0 {
		t.Errorf("sent %v to a daemon that cannot keep ids", got)
	}
	if files, _ := drain.ListDeadLetters(vfs.OS, wabDir); len(files) != 2 {
		t.Errorf("%d files left, want 2", len(files))
	}
}

func TestDeadletterBadFlags(t *testing.T) {
	wabDir := plantDeadLetters(t)
	for _, args := range [][]string{
		{"replay", "--wab-dir", wabDir, "--all", "--code", "nope"},
		{"replay", "--wab-dir", wabDir, "--all", "--since", "yesterday"},
		{"show", "--wab-dir", wabDir},
		{"replay", "--wab-dir", wabDir, "--all", drain.DeadLetterName(1)},
		{"purge", "--wab-dir", wabDir, "--all"},
		{"frobnicate"},
	} {
		if _, _, code := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if _, _, code := run(t, "replay", "--wab-dir", wabDir, "--all", "--socket-path", filepath.Join(t.TempDir(), "none")); code != 1 {
		t.Errorf("replay to no daemon: exit %d, want 1", code)
	}
	if files, _ := drain.ListDeadLetters(vfs.OS, wabDir); len(files) != 2 {
		t.Errorf("%d files left, want 2", len(files))
	}
}
