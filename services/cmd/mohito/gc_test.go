package main

import "testing"

// TestParseMemoryMax: a cgroup's memory limit is read in bytes; "max" (v2) and v1's
// page-rounded "unlimited" value mean no limit.
func TestParseMemoryMax(t *testing.T) {
	for in, want := range map[string]int64{
		"max\n":                 0,
		"1073741824\n":          1 << 30,
		"9223372036854771712\n": 0,
		"":                      0,
		"-1":                    0,
	} {
		if got := parseMemoryMax(in); got != want {
			t.Errorf("parseMemoryMax(%q) = %d, want %d", in, got, want)
		}
	}
}
