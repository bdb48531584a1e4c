package errorfs

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weir-io/weir/internal/vfs"
)

// errnos are the errno names a spec may use.
var errnos = []struct {
	name  string
	errno syscall.Errno
}{
	{"EIO", syscall.EIO},
	{"ENOSPC", syscall.ENOSPC},
	{"EDQUOT", syscall.EDQUOT},
	{"EROFS", syscall.EROFS},
	{"EACCES", syscall.EACCES},
	{"EPERM", syscall.EPERM},
	{"ENOENT", syscall.ENOENT},
	{"EEXIST", syscall.EEXIST},
	{"EBADF", syscall.EBADF},
	{"EINVAL", syscall.EINVAL},
	{"EINTR", syscall.EINTR},
	{"EAGAIN", syscall.EAGAIN},
	{"EMFILE", syscall.EMFILE},
	{"ENFILE", syscall.ENFILE},
	{"EFBIG", syscall.EFBIG},
	{"ENOTDIR", syscall.ENOTDIR},
	{"EISDIR", syscall.EISDIR},
	{"ENODEV", syscall.ENODEV},
	{"ENXIO", syscall.ENXIO},
}

func lookupErrno(name string) (syscall.Errno, bool) {
	for _, e := range errnos {
		if e.name == name {
			return e.errno, true
		}
	}
	return 0, false
}

func errnoName(e syscall.Errno) string {
	for _, x := range errnos {
		if x.errno == e {
			return x.name
		}
	}
	return "errno(" + strconv.Itoa(int(e)) + ")"
}

func parseOp(s string) (Op, bool) {
	for i, name := range opNames {
		if name == s {
			return Op(i), true
		}
	}
	return 0, false
}

// Parse reads rules in the spec grammar described in the package doc.
func Parse(spec string) ([]Rule, error) {
	var rules []Rule
	for i, part := range strings.Split(spec, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, err := parseRule(part)
		if err != nil {
			return nil, fmt.Errorf("errorfs: rule %d %q: %w", i+1, part, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseRule(s string) (Rule, error) {
	fields := strings.Split(s, ":")
	if len(fields) < 2 {
		return Rule{}, fmt.Errorf("want op:glob[:param...]")
	}
	op, ok := parseOp(strings.TrimSpace(fields[0]))
	if !ok {
		return Rule{}, fmt.Errorf("unknown operation %q", fields[0])
	}
	r := Rule{Op: op, Path: strings.TrimSpace(fields[1])}
	if r.Path == "" {
		return Rule{}, fmt.Errorf("empty path glob (use *)")
	}
	seenErrno := false
	for _, p := range fields[2:] {
		p = strings.TrimSpace(p)
		switch {
		case strings.HasPrefix(p, "after="):
			n, err := strconv.Atoi(p[len("after="):])
			if err != nil || n < 0 {
				return Rule{}, fmt.Errorf("bad %q: want after=N with N >= 0", p)
			}
			r.After = n
		case p == "once":
			r.Once = true
		case strings.HasPrefix(p, "larger="):
			n, err := strconv.ParseInt(p[len("larger="):], 10, 64)
			if err != nil || n <= 0 {
				return Rule{}, fmt.Errorf("bad %q: want larger=N with N > 0", p)
			}
			r.Larger = n
		case strings.HasPrefix(p, "delay="):
			d, err := time.ParseDuration(p[len("delay="):])
			if err != nil || d <= 0 {
				return Rule{}, fmt.Errorf("bad %q: want delay=D with a positive Go duration", p)
			}
			r.Delay = d
		case strings.HasPrefix(p, "alternate="):
			d, err := time.ParseDuration(p[len("alternate="):])
			if err != nil || d <= 0 {
				return Rule{}, fmt.Errorf("bad %q: want alternate=P with a positive Go duration", p)
			}
			r.Alternate = d
		case p == "torn":
			r.Torn = true
		case strings.HasPrefix(p, "torn="):
			n, err := strconv.Atoi(p[len("torn="):])
			if err != nil || n <= 0 {
				return Rule{}, fmt.Errorf("bad %q: want torn=N with N > 0", p)
			}
			r.Torn, r.TornBytes = true, n
		default:
			e, ok := lookupErrno(p)
			if !ok {
				return Rule{}, fmt.Errorf("unknown parameter or errno %q", p)
			}
			if seenErrno {
				return Rule{}, fmt.Errorf("more than one errno")
			}
			r.Errno, seenErrno = e, true
		}
	}
	if r.Torn && r.Op != OpWrite && r.Op != OpAny {
		return Rule{}, fmt.Errorf("torn applies to write only")
	}
	if r.Larger > 0 && r.Op != OpWrite && r.Op != OpPreallocate {
		return Rule{}, fmt.Errorf("larger applies to write and preallocate only")
	}
	return r, nil
}

// ParseFS parses spec and wraps inner (vfs.OS when nil) with its rules.
func ParseFS(inner vfs.FS, spec string) (*FS, error) {
	rules, err := Parse(spec)
	if err != nil {
		return nil, err
	}
	return New(inner, rules...), nil
}
