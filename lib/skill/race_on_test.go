//go:build race

package skill_test

// raceSlowdown scales time limits in tests: the race detector makes code
// several times slower.
const raceSlowdown = 10
