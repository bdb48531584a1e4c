package systest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// TestHTTPHostileClients runs the hostile-client suite against the real
// daemon (64 MiB memory budget) while a well-behaved client posts: 5,000
// connections opened and left idle, slow-loris headers and bodies,
// truncated bodies, bad JSON at line N, a wrong encoding, gzip and zstd
// bombs, 64 KiB headers, a 1 GiB Content-Length, too many records. Each
// gets its documented status (or its connection closed) within its
// timeout; the well-behaved client's p99 stays under 1 s; the daemon's
// VmHWM stays under the memory bound of docs/flow_control.md.
func TestHTTPHostileClients(t *testing.T) {
	const budget = 64 << 20
	// Warm-up off: the bombs and the well-behaved client share the whole
	// budget at once (a zstd decoder alone holds 8.25 MiB).
	d := newDaemon(t, "--memory-budget", "64MiB", "--flow-warmup-percent", "100", "--http-max-connections", "6000",
		"--http-read-header-timeout", "2s", "--http-read-timeout", "3s",
		"--http-max-body-bytes", "4MiB", "--http-max-decoded-bytes", "8MiB", "--http-max-records", "1000")
	d.start()
	waitHTTP(t, d)
	_, idleHWM, err := procMem(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", d.httpPort)
	url := "http://" + addr + "/v1/records"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The well-behaved client, throughout.
	var lat []time.Duration
	var wellErr error
	var wellWG sync.WaitGroup
	wellWG.Add(1)
	go func() {
		defer wellWG.Done()
		hc := &http.Client{Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		for i := 0; ctx.Err() == nil; i++ {
			t0 := time.Now()
			resp, err := hc.Post(url, "application/x-ndjson", strings.NewReader(fmt.Sprintf(`{"payload":{"well":%d}}`+"\n", i)))
			if err != nil {
				if ctx.Err() == nil {
					wellErr = err
				}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				wellErr = fmt.Errorf("a well-behaved request answered %d", resp.StatusCode)
				return
			}
			lat = append(lat, time.Since(t0))
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// 5,000 connections opened and left idle: closed by the daemon within
	// read_header_timeout.
	idle := make([]net.Conn, 0, 5000)
	for range 5000 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("after %d idle connections: %v", len(idle), err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()

	// raw sends a request as bytes and reads the status ("closed" when
	// the daemon closed the connection instead), within.
	raw := func(req string, closeWrite bool, within time.Duration) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, req)
		if closeWrite {
			c.(*net.TCPConn).CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(within))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return "still open"
			}
			return "closed"
		}
		resp.Body.Close()
		return fmt.Sprint(resp.StatusCode)
	}
	post := func(body []byte, kv ...string) string {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		for i := 0; i+1 < len(kv); i += 2 {
			req.Header.Set(kv[i], kv[i+1])
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return "error: " + err.Error()
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return fmt.Sprint(resp.StatusCode)
	}
	var gzBomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gzBomb, gzip.BestCompression)
	zw.Write(make([]byte, 64<<20)) // 64 MiB of zeros, about 64 KiB compressed
	zw.Close()
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	zBomb := enc.EncodeAll(make([]byte, 64<<20), nil) // a few KiB
	enc.Close()
	head := "POST /v1/records HTTP/1.1\r\nHost: x\r\n"
	cases := []struct {
		name, want string
		run        func() string
	}{
		{"slow-loris headers", "closed", func() string { return raw(head, false, 10*time.Second) }},
		{"slow body", "408", func() string { return raw(head+"Content-Length: 100\r\n\r\n0123456789", false, 10*time.Second) }},
		{"truncated body", "400", func() string { return raw(head+"Content-Length: 100\r\n\r\n0123456789", true, 10*time.Second) }},
		{"64 KiB of headers", "431", func() string {
			return raw(head+"X-Junk: "+strings.Repeat("j", 64<<10)+"\r\nContent-Length: 1\r\n\r\nx", false, 10*time.Second)
		}},
		{"a 1 GiB Content-Length", "413", func() string { return raw(head+"Content-Length: 1073741824\r\n\r\n", false, 10*time.Second) }},
		{"bad JSON at line 3", "400", func() string {
			return post([]byte("{\"payload\":1}\n{\"payload\":2}\n{\"payload\":\n"), "Content-Type", "application/x-ndjson")
		}},
		{"a wrong encoding", "415", func() string { return post([]byte("x"), "Content-Encoding", "br") }},
		{"a gzip bomb", "413", func() string { return post(gzBomb.Bytes(), "Content-Encoding", "gzip") }},
		{"a zstd bomb", "413", func() string { return post(zBomb, "Content-Encoding", "zstd") }},
		{"too many records", "413", func() string {
			return post([]byte(strings.Repeat("{\"payload\":1}\n", 1001)), "Content-Type", "application/x-ndjson")
		}},
		{"no length", "411", func() string { return raw(head+"\r\n", false, 10*time.Second) }},
	}
	var wg sync.WaitGroup
	results := make([]string, len(cases))
	for i, c := range cases {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = c.run() }()
	}
	wg.Wait()
	for i, c := range cases {
		if results[i] != c.want {
			t.Errorf("%s: got %s, want %s", c.name, results[i], c.want)
		}
	}

	// The idle connections are closed by now (read_header_timeout 2 s).
	time.Sleep(time.Second)
	open := 0
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				open++
			}
		}
	}
	if open > 0 {
		t.Errorf("%d of 5,000 idle connections still open after read_header_timeout", open)
	}

	cancel()
	wellWG.Wait()
	if wellErr != nil {
		t.Fatal(wellErr)
	}
	if len(lat) < 10 {
		t.Fatalf("the well-behaved client made only %d requests", len(lat))
	}
	slices.Sort(lat)
	p99 := lat[len(lat)*99/100]
	_, hwm, err := procMem(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	bound := memBound(budget, idleHWM)
	t.Logf("well-behaved: %d requests, p50 %v, p99 %v; VmHWM idle %d MiB, peak %d MiB, bound %d MiB",
		len(lat), lat[len(lat)/2], p99, idleHWM>>20, hwm>>20, bound>>20)
	if p99 > time.Second {
		t.Errorf("the well-behaved client's p99 is %v, over 1 s", p99)
	}
	if hwm > bound {
		t.Errorf("VmHWM %d MiB over the bound %d MiB (1.3 × memory_budget + 80 MiB)", hwm>>20, bound>>20)
	}
}
