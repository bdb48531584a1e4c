package filesrc_test

import (
	"os"
	"syscall"
)

func devIno(fi os.FileInfo) (uint64, uint64) {
	st := fi.Sys().(*syscall.Stat_t)
	return uint64(st.Dev), uint64(st.Ino)
}
