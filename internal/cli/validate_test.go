package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/weir-io/weir/internal/coord/etcdtest"
	"github.com/weir-io/weir/internal/testenv"
)

// runValidate writes body as weir.toml in a fresh directory — "{dir}"
// in it stands for that directory — and runs weir validate on it with
// args.
func runValidate(t *testing.T, body string, args ...string) (code int, out, file string) {
	t.Helper()
	dir := t.TempDir()
	file = filepath.Join(dir, "weir.toml")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(body, "{dir}", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code = Main(append([]string{"validate", "--config", file}, args...), nil, &stdout, &stderr)
	if stderr.Len() > 0 {
		t.Logf("stderr: %s", stderr.String())
	}
	return code, stdout.String(), file
}

// TestValidateFindings: every kind of finding gives its line — the
// file, the key path, the reason — and exit 1; a good configuration
// gives one OK line and exit 0.
func TestValidateFindings(t *testing.T) {
	const base = "data_dir = \"{dir}/data\"\n"
	for _, tc := range []struct {
		name string
		toml string
		want []string // each a line of the output (without "FILE: ")
	}{
		{"unknown key", base + "shardz = 2\n[sink.file]\nmax_byte = 10\n",
			[]string{"shardz: unknown key", "sink.file.max_byte: unknown key"}},
		{"unknown key in a table", base + "[[secondary]]\nname = \"copy\"\ntype = \"file\"\nqueue_batchez = 3\n",
			[]string{"secondary.queue_batchez: unknown key"}},
		{"bad range", base + "shards = 900\nbatch_deadline = \"-1s\"\n",
			[]string{"shards: must be between 0 and 256 (got 900)", "batch_deadline: "}},
		{"bad range in a table", base + "[[secondary]]\nname = \"copy\"\ntype = \"file\"\nqueue_batches = 0\n",
			[]string{`[[secondary]] "copy" queue_batches: `}},
		{"toml syntax", base + "shards = = 2\n", []string{"weir.toml:2: "}},
		{"missing contract file", base + "[[contract]]\nsource = \"socket\"\nschema_file = \"{dir}/none.json\"\n",
			[]string{`[[contract]] "socket" schema_file: open `}},
		{"contract rule that does not compile", base + "[[contract]]\nsource = \"socket\"\n[[contract.rule]]\nname = \"r\"\nexpr = \"record.a >\"\n",
			[]string{`[[contract]] "socket": contract for stream "socket": rule "r": ERROR: <input>:1:11: Syntax error`}},
		{"raw gate without sources", base + "gate = \"raw\"\n",
			[]string{`gate: needs [[source]] tables`}},
		{"raw gate with producers over TCP", base + "gate = \"raw\"\ntcp_listen = \"127.0.0.1:7000\"\n" + tlsFiles + fileSource,
			[]string{`tcp_listen: must be empty with gate = "raw"`}},
		{"primary raw that cannot be", base + "[sink]\ntype = \"kafka\"\n[sink.kafka]\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"t\"\n[[secondary]]\nname = \"copy\"\ntype = \"file\"\n",
			[]string{`sink.type: must be one of`}},
		{"own raw on a broker", base + "[[source]]\nname = \"k\"\ntype = \"kafka\"\nown_raw = true\n[source.kafka]\nbrokers = [\"127.0.0.1:9092\"]\ntopics = [\"t\"]\ngroup = \"g\"\n[[secondary]]\nname = \"copy\"\ntype = \"file\"\n",
			[]string{`[[source]] "k" own_raw: is refused for a kafka source`}},
		{"coordination mode 2", base + "[coordination]\nmode = 2\n",
			[]string{"coordination.mode: is refused: a quorum of two is two"}},
		{"coordination mode 4", base + "[coordination]\nmode = 4\n",
			[]string{"coordination.mode: is refused: an even size"}},
		{"recovery leases without coordination", base + "[coordination]\nrecovery_leases = true\n",
			[]string{"coordination.recovery_leases: needs coordination"}},
		{"coordination joins and names endpoints", base + "[coordination]\nmode = 1\njoin = [\"127.0.0.1:2379\"]\nendpoints = [\"127.0.0.1:2379\"]\n",
			[]string{"coordination: coord: invalid configuration: join and endpoints exclude each other"}},
		{"TLS files missing", base + "tcp_listen = \"127.0.0.1:7000\"\n" + tlsFiles,
			[]string{"tcp_listen: tls_cert_file: stat {dir}/cert.pem: no such file or directory"}},
		{"TLS half configured", base + "tcp_listen = \"127.0.0.1:7000\"\ntls_cert_file = \"{dir}/cert.pem\"\n",
			[]string{`tls_key_file: is required because tcp_listen is set`, `tls_client_ca_file: is required because tcp_listen is set`}},
		{"token file missing", base + "[http]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{dir}/tokens\"\n",
			[]string{"http.token_file: http.token_file: open {dir}/tokens: no such file or directory"}},
		{"backup key file missing", base + "[coordination]\nmode = 1\nbackup_key_file = \"{dir}/keys\"\n",
			[]string{"coordination.backup_key_file: coordination.backup_key_file: open {dir}/keys"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, file := runValidate(t, tc.toml)
			if code != 1 {
				t.Errorf("exit %d, want 1:\n%s", code, out)
			}
			dir := filepath.Dir(file)
			for _, w := range tc.want {
				w = strings.ReplaceAll(w, "{dir}", dir)
				if !hasLine(out, file, w) {
					t.Errorf("no line %q:\n%s", file+": "+w, out)
				}
			}
			if !strings.HasSuffix(out, fmt.Sprintf("%s: %s\n", file, plural(strings.Count(out, "\n")-1, "finding"))) {
				t.Errorf("last line is not the count of findings:\n%s", out)
			}
		})
	}
}

// TestValidateGood: a configuration without findings gives one OK line
// and exit 0, with every kind of table in it.
func TestValidateGood(t *testing.T) {
	schema := `{"type": "object", "required": ["id"]}`
	code, out, file := runValidate(t, `data_dir = "{dir}/data"
shards = 2
[[secondary]]
name = "copy"
type = "parquet"
[[source]]
name = "files"
type = "file"
[source.file]
glob = "{dir}/in/*.ndjson"
[[contract]]
source = "files"
schema_file = "{dir}/schema.json"
natural_key = ["/id"]
unique = true
  [[contract.rule]]
  name = "has_id"
  expr = "record.id != ''"
  [contract.dedup]
  store = "memory"
`, "--connect")
	_ = schema
	if code != 1 || !hasLine(out, file, `[[contract]] "files" schema_file: open `+filepath.Join(filepath.Dir(file), "schema.json")+": no such file or directory") {
		t.Fatalf("without its schema file: exit %d:\n%s", code, out)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(file), "schema.json"), []byte(schema), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code = Main([]string{"validate", "--config", file, "--connect"}, nil, &stdout, &stderr)
	want := "no server to connect to: the configuration names none\n" + file + ": OK\n"
	if code != 0 || stdout.String() != want {
		t.Fatalf("exit %d, output:\n%s\nwant:\n%s%s", code, stdout.String(), want, stderr.String())
	}
}

// TestValidateUsage: no --config is a usage error (exit 2), as is an
// argument.
func TestValidateUsage(t *testing.T) {
	for _, args := range [][]string{{"validate"}, {"validate", "--config", "x.toml", "extra"}, {"validate", "--nope"}} {
		var stdout, stderr bytes.Buffer
		if code := Main(args, nil, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"validate", "--config", filepath.Join(t.TempDir(), "none.toml")}, nil, &stdout, &stderr); code != 1 ||
		!strings.Contains(stdout.String(), "none.toml: open ") {
		t.Errorf("a missing file: exit %d:\n%s", code, stdout.String())
	}
}

// TestValidateConnect: with --connect every server the file names is
// dialled and authenticated — one OK line each for the real servers of
// this machine (testenv), an in-process Kafka (kfake), an embedded etcd
// and an in-memory S3 — and a server nobody listens for is one FAIL line
// with the driver's reason and exit 1.
func TestValidateConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	closed, _, err := testenv.FreshPort("127.0.0.1") // nobody listens there
	if err != nil {
		t.Fatal(err)
	}
	const base = "data_dir = \"{dir}/data\"\n"
	secondary := func(kind, body string) string {
		return base + "[[secondary]]\nname = \"s\"\ntype = \"" + kind + "\"\n[secondary." + kind + "]\n" + body
	}
	type server struct {
		name string
		toml func(t *testing.T) string
		ok   string // the OK line's subject
	}
	servers := []server{
		{"postgres", func(t *testing.T) string {
			return secondary("postgres", fmt.Sprintf("dsn = %q\n", testenv.Postgres(t)))
		}, `[[secondary]] "s" postgres`},
		{"postgres quarantine and dq-audit table", func(t *testing.T) string {
			dsn := testenv.Postgres(t)
			return fmt.Sprintf(base+"[dq_audit]\npostgres_url = %q\n[[secondary]]\nname = \"s\"\ntype = \"file\"\nquarantine_postgres_url = %q\n[[contract]]\nsource = \"socket\"\n", dsn, dsn)
		}, `[[secondary]] "s" quarantine_postgres_url`},
		{"mysql", func(t *testing.T) string {
			return secondary("mysql", fmt.Sprintf("dsn = %q\n", testenv.MySQL(t)))
		}, `[[secondary]] "s" mysql`},
		{"nats", func(t *testing.T) string {
			url := testenv.NATS(t)
			stream := "VALIDATE_" + strings.ToUpper(testenv.Suffix())
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{strings.ToLower(stream) + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })
			return fmt.Sprintf(base+"[[source]]\nname = \"n\"\ntype = \"nats\"\n[source.nats]\nurl = %q\nstream = %q\nconsumer = \"c\"\n", url, stream)
		}, `[[source]] "n" nats`},
		{"redis", func(t *testing.T) string {
			addr := testenv.Redis(t)
			return base + "[[secondary]]\nname = \"s\"\ntype = \"file\"\n[[contract]]\nsource = \"socket\"\npayload_unique = true\n[contract.dedup]\nstore = \"redis\"\nredis_url = \"redis://" + addr + "\"\n"
		}, `[[contract]] "socket" dedup redis_url`},
		{"kafka", func(t *testing.T) string {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			b := fmt.Sprintf("%q", c.ListenAddrs()[0])
			return secondary("kafka", "brokers = ["+b+"]\ntopic = \"out\"\n") +
				"[[source]]\nname = \"k\"\ntype = \"kafka\"\n[source.kafka]\nbrokers = [" + b + "]\ntopics = [\"in\"]\ngroup = \"g\"\n"
		}, `[[source]] "k" kafka`},
		{"etcd and object storage", func(t *testing.T) string {
			etcd := etcdtest.Start(t)
			return fmt.Sprintf(base+"[coordination]\nmode = 1\nendpoints = [%q]\nbackup_url = %q\n",
				strings.TrimPrefix(etcd.Endpoint, "http://"), fakeS3(t))
		}, "coordination.endpoints"},
	}
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			code, out, file := runValidate(t, s.toml(t), "--connect", "--timeout", "10s")
			if code != 0 || !strings.Contains(out, "\nOK   "+s.ok+" (") && !strings.HasPrefix(out, "OK   "+s.ok+" (") || !strings.HasSuffix(out, file+": OK\n") {
				t.Fatalf("exit %d, want 0 and a line OK   %s:\n%s", code, s.ok, out)
			}
		})
	}

	for _, tc := range []struct {
		name, toml, fail string
	}{
		{"postgres", secondary("postgres", "dsn = \"postgres://postgres@"+closed+"/test?sslmode=disable\"\n"), `[[secondary]] "s" postgres: pgsink: connect: `},
		{"mysql", secondary("mysql", "dsn = \"root@tcp("+closed+")/test\"\n"), `[[secondary]] "s" mysql: mysqlsink: connect: `},
		{"nats", base + "[[source]]\nname = \"n\"\ntype = \"nats\"\n[source.nats]\nurl = \"nats://" + closed + "\"\nstream = \"S\"\nconsumer = \"c\"\n", `[[source]] "n" nats: natssrc: connect nats://` + closed + ": "},
		{"redis", base + "[[secondary]]\nname = \"s\"\ntype = \"file\"\n[[contract]]\nsource = \"socket\"\npayload_unique = true\n[contract.dedup]\nstore = \"redis\"\nredis_url = \"redis://" + closed + "\"\n", `[[contract]] "socket" dedup redis_url: dedup: redis ` + closed + ": "},
		{"kafka", secondary("kafka", "brokers = [\""+closed+"\"]\ntopic = \"out\"\n"), `[[secondary]] "s" kafka: kafkasink: no broker answers at ` + closed + ": "},
		{"etcd", base + "[coordination]\nmode = 1\nendpoints = [\"" + closed + "\"]\n", "coordination.endpoints: "},
		{"object storage", base + "[coordination]\nmode = 1\nbackup_url = \"s3://weir/x?region=us-east-1&endpoint=http://" + closed + "&use_path_style=true\"\n", "coordination.backup_url: backup: "},
	} {
		t.Run("unreachable "+tc.name, func(t *testing.T) {
			if tc.name == "object storage" {
				fakeS3(t) // the credentials
			}
			start := time.Now()
			code, out, file := runValidate(t, tc.toml, "--connect", "--timeout", "2s")
			if code != 1 || !strings.Contains(out, "FAIL "+tc.fail) || !strings.HasSuffix(out, file+": 1 server failed\n") {
				t.Fatalf("exit %d, want 1 and a line FAIL %s…:\n%s", code, tc.fail, out)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("took %v with --timeout 2s", took)
			}
		})
	}
}

// TestValidateConnectRefused: a server that answers but refuses the
// configured credentials, or lacks what the configuration names, is a
// FAIL line with the server's own reason.
func TestValidateConnectRefused(t *testing.T) {
	const base = "data_dir = \"{dir}/data\"\n"
	for _, tc := range []struct {
		name string
		toml func(t *testing.T) string
		fail string
	}{
		{"postgres role", func(t *testing.T) string {
			dsn, err := url.Parse(testenv.Postgres(t))
			if err != nil {
				t.Skipf("%s is not a URL", testenv.PostgresEnv)
			}
			dsn.User = url.User("weir_no_such_role")
			return base + "[[secondary]]\nname = \"s\"\ntype = \"postgres\"\n[secondary.postgres]\ndsn = \"" + dsn.String() + "\"\n"
		}, `role "weir_no_such_role" does not exist`},
		{"mysql password", func(t *testing.T) string {
			cfg, err := mysql.ParseDSN(testenv.MySQL(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.User, cfg.Passwd = "weir_no_such_user", "wrong"
			return base + "[[secondary]]\nname = \"s\"\ntype = \"mysql\"\n[secondary.mysql]\ndsn = \"" + cfg.FormatDSN() + "\"\n"
		}, "Access denied for user 'weir_no_such_user'"},
		{"nats stream", func(t *testing.T) string {
			return base + fmt.Sprintf("[[source]]\nname = \"n\"\ntype = \"nats\"\n[source.nats]\nurl = %q\nstream = \"WEIR_NO_SUCH_STREAM\"\nconsumer = \"c\"\n", testenv.NATS(t))
		}, `natssrc: stream "WEIR_NO_SUCH_STREAM": nats: API error: code=404`},
		{"kafka topic", func(t *testing.T) string {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return base + fmt.Sprintf("[[secondary]]\nname = \"s\"\ntype = \"kafka\"\n[secondary.kafka]\nbrokers = [%q]\ntopic = \"absent\"\n", c.ListenAddrs()[0])
		}, `kafkasink: topic "absent" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := runValidate(t, tc.toml(t), "--connect")
			if code != 1 || !strings.Contains(out, "FAIL ") || !strings.Contains(out, tc.fail) {
				t.Fatalf("exit %d, want 1 and a FAIL line with %q:\n%s", code, tc.fail, out)
			}
		})
	}
}

// fakeS3 serves an in-memory S3 holding bucket "weir" and returns the
// backup URL of a prefix in it; it sets the credentials the AWS SDK
// reads from the environment.
func fakeS3(t *testing.T) string {
	s3 := testenv.FakeS3(t, "weir", nil)
	s3.SetEnv(t)
	return s3.URL("backups")
}

// TestValidateExamples validates every example configuration in the
// repository — examples/*.toml, any .toml under docs/ and deploy/, and
// the ```toml blocks of README.md and docs/ that are whole
// configurations — as CI does: each must give exit 0. Paths in them are
// relative to the working directory, as weir serve takes them; they run
// from a scratch directory.
func TestValidateExamples(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, dir := range []string{"examples", "docs", "deploy"} {
		filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".toml") {
				files = append(files, p)
			}
			return nil
		})
	}
	if len(files) == 0 {
		t.Fatal("no example configuration found")
	}
	scratch := t.TempDir()
	t.Chdir(scratch)
	// The ```toml blocks of the documentation too, but for the ones
	// that show a part of a configuration, not a whole one.
	fragments := map[string]string{
		"docs/data_quality.md#1":        "one [[contract]] table: its stream, schema file and secondaries are not shown",
		"docs/extending.md#1":           "a secondary of the example kind jsonl, registered by examples/jsonlsink, not a built-in",
		"docs/operations/tcp-mtls.md#1": "names the certificates the steps above it make",
	}
	blocks := 0
	blockNames := map[string]string{} // file written → FILE#N, the N-th ```toml block of FILE
	for _, dir := range []string{"docs", "README.md"} {
		filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, p)
			for i, body := range tomlBlocks(string(b)) {
				name := fmt.Sprintf("%s#%d", rel, i+1)
				blocks++
				if _, ok := fragments[name]; ok {
					delete(fragments, name)
					continue
				}
				f := filepath.Join(scratch, fmt.Sprintf("block%d.toml", blocks))
				if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
				blockNames[f] = name
			}
			return nil
		})
	}
	for name, why := range fragments {
		t.Errorf("%s is listed as a fragment (%s) but is no longer there", name, why)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		if n, ok := blockNames[f]; ok {
			rel = n
		}
		t.Run(rel, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := Main([]string{"validate", "--config", f}, nil, &stdout, &stderr); code != 0 {
				t.Errorf("weir validate --config %s: exit %d\n%s%s", rel, code, stdout.String(), stderr.String())
			}
		})
	}
}

// tomlBlocks are the bodies of the ```toml blocks of a Markdown text.
func tomlBlocks(md string) []string {
	var out []string
	for {
		i := strings.Index(md, "```toml\n")
		if i < 0 {
			return out
		}
		md = md[i+len("```toml\n"):]
		j := strings.Index(md, "```")
		if j < 0 {
			return out
		}
		out = append(out, md[:j])
		md = md[j+3:]
	}
}

// hasLine reports whether out has a line "file: " + rest, or "file:N: "
// + rest for a rest starting with ":".
func hasLine(out, file, rest string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(rest, file) && strings.HasPrefix(l, rest) {
			return true
		}
		if strings.HasPrefix(l, file) && strings.Contains(l, rest) {
			return true
		}
	}
	return false
}

const tlsFiles = "tls_cert_file = \"{dir}/cert.pem\"\ntls_key_file = \"{dir}/key.pem\"\ntls_client_ca_file = \"{dir}/ca.pem\"\n"

const fileSource = "[[source]]\nname = \"files\"\ntype = \"file\"\n[source.file]\nglob = \"{dir}/in/*.ndjson\"\n"
