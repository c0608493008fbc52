// Package envflag binds command-line flags to environment-variable fallbacks.
//
// A flag's value comes from, in order of precedence: the command line, the
// first of its environment variables that is set, the default in the code.
// Every flag's usage text names its variables, so `-h` documents them.
//
// An environment value that does not parse as the flag's type is never
// ignored: Set records it when the flag is bound and Parse returns every such
// value, joined, so a command can refuse to start with a message naming the
// variable and the bad value:
//
//	fs := envflag.New("demo", "MOHITO_")
//	fs.Int(&rounds, "rounds", 20, "rounds to run")   // -rounds, env MOHITO_ROUNDS
//	if err := fs.Parse(os.Args[2:]); err != nil {
//		// MOHITO_ROUNDS="ten" is not an integer
//	}
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Set is a flag.FlagSet (ContinueOnError) whose flags fall back to
// environment variables. Bind flags with its methods; a flag bound on
// [Set.FlagSet] directly has no fallback.
type Set struct {
	fs     *flag.FlagSet
	prefix string
	errs   []error
}

// New returns an empty Set named name. A flag bound without explicit
// environment variables falls back to prefix + its name in upper case with
// dashes as underscores (prefix "OBSCURA_", flag -max-batch:
// OBSCURA_MAX_BATCH); with prefix "" such a flag has no fallback.
func New(name, prefix string) *Set {
	return &Set{fs: flag.NewFlagSet(name, flag.ContinueOnError), prefix: prefix}
}

// FlagSet is the underlying flag set (for Lookup, SetOutput, Usage, …).
func (s *Set) FlagSet() *flag.FlagSet { return s.fs }

// Args is what remains of the command line after Parse.
func (s *Set) Args() []string { return s.fs.Args() }

// EnvName is the variable the flag name falls back to by default.
func (s *Set) EnvName(name string) string {
	if s.prefix == "" {
		return ""
	}
	return s.prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// String binds the string flag name to p. env lists the variables it falls
// back to, the first one set winning; none means [Set.EnvName].
func (s *Set) String(p *string, name, def, usage string, env ...string) {
	bind(s, p, name, def, usage, env, "a string", func(v string) (string, error) { return v, nil }, s.fs.StringVar)
}

// Int binds the integer flag name to p (see [Set.String] for env).
func (s *Set) Int(p *int, name string, def int, usage string, env ...string) {
	bind(s, p, name, def, usage, env, "an integer", strconv.Atoi, s.fs.IntVar)
}

// Bool binds the boolean flag name to p; the variable takes what
// [strconv.ParseBool] accepts (1, t, true, 0, f, false, …).
func (s *Set) Bool(p *bool, name string, def bool, usage string, env ...string) {
	bind(s, p, name, def, usage, env, "a boolean (true or false)", strconv.ParseBool, s.fs.BoolVar)
}

// Duration binds the duration flag name to p; the variable takes what
// [time.ParseDuration] accepts (500ms, 1h30m, …).
func (s *Set) Duration(p *time.Duration, name string, def time.Duration, usage string, env ...string) {
	bind(s, p, name, def, usage, env, "a duration (e.g. 500ms, 1h)", time.ParseDuration, s.fs.DurationVar)
}

// Float64 binds the floating-point flag name to p.
func (s *Set) Float64(p *float64, name string, def float64, usage string, env ...string) {
	bind(s, p, name, def, usage, env, "a number", func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }, s.fs.Float64Var)
}

func bind[T any](s *Set, p *T, name string, def T, usage string, env []string, what string,
	parse func(string) (T, error), register func(*T, string, T, string)) {
	if len(env) == 0 {
		if e := s.EnvName(name); e != "" {
			env = []string{e}
		}
	}
	for _, e := range env {
		v, ok := os.LookupEnv(e)
		if !ok {
			continue
		}
		if x, err := parse(v); err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q is not %s", e, v, what))
		} else {
			def = x
		}
		break
	}
	if len(env) > 0 {
		usage += " (env " + strings.Join(env, " or ") + ")"
	}
	register(p, name, def, usage)
}

// Parse parses args. It returns [flag.ErrHelp] for -h, the flag package's
// error for a bad command line, and otherwise every malformed environment
// value seen while binding, joined with [errors.Join] (nil if none).
func (s *Set) Parse(args []string) error {
	if err := s.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errors.Join(append([]error{err}, s.errs...)...)
	}
	return errors.Join(s.errs...)
}
