package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-io/weir/internal/config"
)

func TestBackupKeys(t *testing.T) {
	a, b := strings.Repeat("0a", 32), strings.Repeat("0b", 32)
	file := filepath.Join(t.TempDir(), "backup.key")
	if err := os.WriteFile(file, []byte("# newest first\n"+a+"\n"+b+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		co   config.CoordinationConfig
		n    int
		fail string
	}{
		{config.CoordinationConfig{}, 0, ""},
		{config.CoordinationConfig{BackupKey: a + "," + b}, 2, ""},
		{config.CoordinationConfig{BackupKeyFile: file}, 2, ""},
		{config.CoordinationConfig{BackupKey: "short"}, 0, "coordination.backup_key: "},
		{config.CoordinationConfig{BackupKeyFile: file + ".missing"}, 0, "coordination.backup_key_file: "},
	} {
		keys, err := backupKeys(tc.co)
		if tc.fail == "" && (err != nil || len(keys) != tc.n) {
			t.Errorf("%+v: %d keys, %v; want %d", tc.co, len(keys), err, tc.n)
		}
		if tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)) {
			t.Errorf("%+v: %v; want an error naming %q", tc.co, err, tc.fail)
		}
	}
}
