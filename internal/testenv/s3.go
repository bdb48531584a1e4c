package testenv

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 is an in-memory S3 (gofakes3) on a loopback port, holding one
// bucket, for the test's duration.
type S3 struct {
	// Endpoint is the server's URL (http://127.0.0.1:port).
	Endpoint string
	// Bucket is the bucket it holds.
	Bucket string
	// Env is the environment an S3 client needs to sign its requests
	// without looking for real credentials (KEY=value each).
	Env []string
}

// FakeS3 serves an in-memory S3 holding bucket until the test ends. wrap,
// when not nil, wraps its handler (to break some requests).
func FakeS3(t testing.TB, bucket string, wrap func(http.Handler) http.Handler) *S3 {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	h := gofakes3.New(backend).Server()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	none := filepath.Join(t.TempDir(), "none")
	return &S3{Endpoint: srv.URL, Bucket: bucket, Env: []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=" + none, "AWS_SHARED_CREDENTIALS_FILE=" + none}}
}

// URL is the s3:// URL of prefix in the bucket, with the query gocloud's
// s3blob needs to reach this server.
func (s *S3) URL(prefix string) string {
	return fmt.Sprintf("s3://%s/%s?region=us-east-1&endpoint=%s&use_path_style=true", s.Bucket, prefix, s.Endpoint)
}

// SetEnv sets s.Env in this process for the test (t.Setenv).
func (s *S3) SetEnv(t *testing.T) {
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}
