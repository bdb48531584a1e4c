//go:build !dst

package engine

func dstCoverEarly() bool { return false }
