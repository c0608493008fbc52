package main

import (
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

// quiet discards what the flag package prints (usage on a bad command line).
func quiet(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = null
	t.Cleanup(func() { os.Stderr = stderr; null.Close() })
}

func TestMalformedEnvIsConfigError(t *testing.T) {
	quiet(t)
	cases := []struct {
		run      func([]string) error
		env, val string
		want     string
	}{
		{runDemo, "OBSCURA_PARTICIPANTS", "many", `OBSCURA_PARTICIPANTS="many" is not an integer`},
		{runMixer, "OBSCURA_POLL", "soon", `OBSCURA_POLL="soon" is not a duration`},
		{runProxy, "OBSCURA_THRESHOLD", "ten", `OBSCURA_THRESHOLD="ten" is not an integer`},
		{runSubmit, "OBSCURA_BATCH", "", `OBSCURA_BATCH="" is not an integer`},
	}
	for _, tc := range cases {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.val)
			err := tc.run(nil)
			if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a configuration error saying %s", err, tc.want)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	quiet(t)
	for name, args := range map[string][]string{
		"bad flag":      {"-nope"},
		"stray arg":     {"extra"},
		"invalid value": {"-participants", "1"},
	} {
		if err := runDemo(args); !errors.Is(err, errConfig) {
			t.Errorf("%s: runDemo(%q) = %v, want a configuration error", name, args, err)
		}
	}
	if err := runKeygen([]string{"-group", "p384", "-out", "x"}); !errors.Is(err, errConfig) {
		t.Errorf("keygen -group p384: %v, want a configuration error", err)
	}
	if err := runOracle([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("oracle -h: %v, want flag.ErrHelp", err)
	}
}

// TestJobFlagErrors: an invalid job flag is reported by its name as typed (--flag) and, for a
// number, with the range it must lie in.
func TestJobFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--threshold", "0"}, "--threshold must be in [1, 4294967295], not 0"},
		{[]string{"--threshold", "4294967296"}, "--threshold must be in [1, 4294967295], not 4294967296"},
		{[]string{"--chunks", "0"}, "--chunks must be in [1, 16], not 0"},
		{[]string{"--chunks", "17"}, "--chunks must be in [1, 16], not 17"},
		{[]string{"--group", "p384"}, `--group must be ristretto255 or p256, not "p384"`},
		{[]string{"--count-mode", "sometimes"}, `--count-mode must be distinct_participants or tuples, not "sometimes"`},
		{[]string{"--values", "1,x"}, "--values:"},
		{[]string{"--db-public-key", "zz"}, "--db-public-key:"},
		{[]string{"--proxy-public-key", "zz"}, "--proxy-public-key:"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := newFlags("job")
			var j jobFlags
			j.register(f)
			if err := parseFlags(f, tc.args); err != nil {
				t.Fatal(err)
			}
			if _, err := j.build(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %s", err, tc.want)
			}
		})
	}
}
