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
