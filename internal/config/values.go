package config

import (
	"time"

	"github.com/weir-io/weir/internal/config/setting"
)

// ParseSize reads a byte count: a plain integer of bytes, or an integer
// followed by KiB, MiB or GiB (see setting.ParseSize).
func ParseSize(s string) (int64, error) { return setting.ParseSize(s) }

// FormatSize writes n in the largest of GiB, MiB, KiB that divides it
// exactly, or in bytes.
func FormatSize(n int64) string { return setting.FormatSize(n) }

func parseDuration(s string) (time.Duration, error) { return setting.ParseDuration(s) }

func formatDuration(d time.Duration) string { return setting.FormatDuration(d) }
