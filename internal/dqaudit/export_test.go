package dqaudit

// SetFileMaxBytes changes where w rolls to a new file.
func SetFileMaxBytes(w *DirWriter, n int64) { w.log = w.newLog(n) }
