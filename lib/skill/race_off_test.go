//go:build !race

package skill_test

const raceSlowdown = 1
