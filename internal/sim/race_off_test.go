//go:build dst && !race

package sim

const raceEnabled = false
