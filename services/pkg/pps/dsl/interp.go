package dsl

import (
	"errors"
	"fmt"
	"math"

	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// ErrProgram is wrapped by every error of a program that parses but cannot be compiled.
var ErrProgram = errors.New("dsl: invalid program")

// Limits on compile-time evaluation: a function's source comes from the network.
const (
	maxSteps = 50_000_000
	maxDepth = 20_000
)

// Runtime values of the interpreter. Lists are immutable Go slices; () is the empty list.
type (
	// number is a secret (or constant) Q24.8 value. valid is the validity bit of a value read
	// with val (nil for computed values: always valid); ident is its slot's nullifying
	// value, so builtins can skip masking when the hard-wired identity is already 0.
	number struct {
		n     num
		k     *pps.Fixed // the value when it is known at compile time
		valid bit
		ident *pps.Fixed
	}
	secretBit struct{ b bit }
	list      []value
	closure   struct {
		params []Symbol
		body   []Node
		env    *env
	}
	builtin func(in *interp, args []value) (value, error)
	value   any
)

type env struct {
	vars   map[Symbol]value
	parent *env
}

func (e *env) lookup(s Symbol) (value, bool) {
	for ; e != nil; e = e.parent {
		if v, ok := e.vars[s]; ok {
			return v, true
		}
	}
	return nil, false
}

// interp evaluates a program on one backend, recording the slots it reads.
type interp struct {
	be        backend
	slots     []pps.SlotSpec
	minInputs int
	steps     int
	depth     int
}

func (in *interp) errorf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrProgram, fmt.Sprintf(format, a...))
}

func (in *interp) run(forms []Node) (value, error) {
	global := &env{vars: map[Symbol]value{}, parent: &env{vars: builtins}}
	var last value
	for _, f := range forms {
		v, err := in.eval(f, global)
		if err != nil {
			return nil, err
		}
		last = v
	}
	return last, nil
}

func (in *interp) eval(n Node, e *env) (value, error) {
	if in.steps++; in.steps > maxSteps {
		return nil, in.errorf("evaluation exceeds %d steps", maxSteps)
	}
	switch n := n.(type) {
	case Symbol:
		v, ok := e.lookup(n)
		if !ok {
			return nil, in.errorf("undefined %q", n)
		}
		return v, nil
	case Number:
		return in.literal(n)
	case string, bool:
		return n, nil
	case List:
		if len(n) == 0 {
			return list{}, nil // the listings write () unquoted
		}
		if s, ok := n[0].(Symbol); ok {
			if f, ok := specialForms[s]; ok {
				if _, shadowed := e.lookupUser(s); !shadowed {
					return f(in, n, e)
				}
			}
		}
		fn, err := in.eval(n[0], e)
		if err != nil {
			return nil, err
		}
		args := make([]value, len(n)-1)
		for i, a := range n[1:] {
			if args[i], err = in.eval(a, e); err != nil {
				return nil, err
			}
		}
		return in.apply(fn, args)
	}
	return nil, in.errorf("cannot evaluate %T", n)
}

// lookupUser reports a user definition of s (special forms can be shadowed by define).
func (e *env) lookupUser(s Symbol) (value, bool) {
	for ; e != nil && e.vars != nil; e = e.parent {
		if e.parent == nil { // the builtins frame
			return nil, false
		}
		if v, ok := e.vars[s]; ok {
			return v, true
		}
	}
	return nil, false
}

func (in *interp) apply(fn value, args []value) (value, error) {
	if in.depth++; in.depth > maxDepth {
		return nil, in.errorf("recursion deeper than %d", maxDepth)
	}
	defer func() { in.depth-- }()
	switch f := fn.(type) {
	case builtin:
		return f(in, args)
	case *closure:
		if len(args) != len(f.params) {
			return nil, in.errorf("procedure of %d arguments called with %d", len(f.params), len(args))
		}
		local := &env{vars: make(map[Symbol]value, len(args)), parent: f.env}
		for i, p := range f.params {
			local.vars[p] = args[i]
		}
		var v value
		for _, b := range f.body {
			var err error
			if v, err = in.eval(b, local); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
	return nil, in.errorf("%s is not a procedure", describe(fn))
}

func (in *interp) literal(n Number) (value, error) {
	if math.IsNaN(n.Value) || math.Abs(n.Value) >= 1<<23 {
		return nil, in.errorf("number %s outside Q24.8", n.Text)
	}
	return in.konst(pps.FixedFromFloat(n.Value)), nil
}

func (in *interp) konst(x pps.Fixed) *number {
	return &number{n: in.be.konst(x), k: &x}
}

func describe(v value) string {
	switch v := v.(type) {
	case *number:
		return "a number"
	case secretBit:
		return "a bit"
	case list:
		return fmt.Sprintf("a list of %d", len(v))
	case *closure, builtin:
		return "a procedure"
	case string:
		return fmt.Sprintf("%q", v)
	case bool:
		return fmt.Sprintf("%v", v)
	case Symbol:
		return "symbol " + string(v)
	}
	return fmt.Sprintf("%T", v)
}

type specialForm func(in *interp, n List, e *env) (value, error)

var specialForms map[Symbol]specialForm

func init() {
	specialForms = map[Symbol]specialForm{
		"begin":          formBegin,
		"define":         formDefine,
		"lambda":         formLambda,
		"if":             formIf,
		"let":            formLet,
		"quote":          formQuote,
		"start-building": func(*interp, List, *env) (value, error) { return list{}, nil },
		"min-inputs":     formMinInputs,
	}
}

func formBegin(in *interp, n List, e *env) (value, error) {
	var v value = list{}
	for _, f := range n[1:] {
		var err error
		if v, err = in.eval(f, e); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func formDefine(in *interp, n List, e *env) (value, error) {
	if len(n) < 3 {
		return nil, in.errorf("define needs a name and a value")
	}
	switch target := n[1].(type) {
	case Symbol:
		if len(n) != 3 {
			return nil, in.errorf("(define %s ...) takes one value", target)
		}
		v, err := in.eval(n[2], e)
		if err != nil {
			return nil, err
		}
		e.vars[target] = v
		return list{}, nil
	case List: // (define (f x y) body...)
		if len(target) == 0 {
			return nil, in.errorf("define of ()")
		}
		name, ok := target[0].(Symbol)
		if !ok {
			return nil, in.errorf("define of a non-symbol")
		}
		c, err := in.closure(target[1:], n[2:], e)
		if err != nil {
			return nil, err
		}
		e.vars[name] = c
		return list{}, nil
	}
	return nil, in.errorf("define of %T", n[1])
}

func (in *interp) closure(params List, body []Node, e *env) (*closure, error) {
	c := &closure{body: body, env: e}
	for _, p := range params {
		s, ok := p.(Symbol)
		if !ok {
			return nil, in.errorf("parameter %v is not a symbol", p)
		}
		c.params = append(c.params, s)
	}
	if len(body) == 0 {
		return nil, in.errorf("lambda without a body")
	}
	return c, nil
}

func formLambda(in *interp, n List, e *env) (value, error) {
	if len(n) < 3 {
		return nil, in.errorf("lambda needs parameters and a body")
	}
	params, ok := n[1].(List)
	if !ok {
		return nil, in.errorf("lambda parameters must be a list")
	}
	return in.closure(params, n[2:], e)
}

func formIf(in *interp, n List, e *env) (value, error) {
	if len(n) != 4 {
		return nil, in.errorf("if takes a condition and two branches")
	}
	c, err := in.eval(n[1], e)
	if err != nil {
		return nil, err
	}
	b, ok := c.(bool)
	if !ok {
		// A circuit cannot branch on a secret: both sides would have to be built anyway.
		return nil, in.errorf("if needs a compile-time condition, got %s (use mux for secret values)", describe(c))
	}
	if b {
		return in.eval(n[2], e)
	}
	return in.eval(n[3], e)
}

func formLet(in *interp, n List, e *env) (value, error) {
	if len(n) < 3 {
		return nil, in.errorf("let needs bindings and a body")
	}
	binds, ok := n[1].(List)
	if !ok {
		return nil, in.errorf("let bindings must be a list")
	}
	local := &env{vars: map[Symbol]value{}, parent: e}
	for _, b := range binds {
		bl, ok := b.(List)
		if !ok || len(bl) != 2 {
			return nil, in.errorf("a let binding is (name value)")
		}
		name, ok := bl[0].(Symbol)
		if !ok {
			return nil, in.errorf("a let binding's name must be a symbol")
		}
		v, err := in.eval(bl[1], e)
		if err != nil {
			return nil, err
		}
		local.vars[name] = v
	}
	return formBegin(in, append(List{nil}, n[2:]...), local)
}

func formQuote(in *interp, n List, _ *env) (value, error) {
	if len(n) != 2 {
		return nil, in.errorf("quote takes one datum")
	}
	return in.datum(n[1])
}

func (in *interp) datum(n Node) (value, error) {
	switch n := n.(type) {
	case List:
		l := make(list, len(n))
		for i, e := range n {
			var err error
			if l[i], err = in.datum(e); err != nil {
				return nil, err
			}
		}
		return l, nil
	case Number:
		return in.literal(n)
	}
	return n, nil
}

func formMinInputs(in *interp, n List, e *env) (value, error) {
	if len(n) != 2 {
		return nil, in.errorf("min-inputs takes one count")
	}
	v, err := in.eval(n[1], e)
	if err != nil {
		return nil, err
	}
	k, err := in.intArg(v, "min-inputs")
	if err != nil {
		return nil, err
	}
	in.minInputs = k
	return list{}, nil
}

// intArg is a non-negative compile-time integer argument.
func (in *interp) intArg(v value, what string) (int, error) {
	x, ok := v.(*number)
	if !ok || x.k == nil || *x.k%pps.One != 0 || *x.k < 0 {
		return 0, in.errorf("%s needs a non-negative integer known at compile time, got %s", what, describe(v))
	}
	return int(*x.k / pps.One), nil
}
