//go:build dst && race

package sim

const raceEnabled = true
