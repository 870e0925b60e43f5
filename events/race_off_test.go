//go:build !race

package events_test

const raceSlowdown = 1
