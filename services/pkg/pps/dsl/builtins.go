package dsl

import (
	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// builtins is D10's builtin set: the Scheme core, the circuit operations and the statistics
// blocks. It is the outermost frame, so a program may redefine any of them (Listing 1
// defines its own fold and min).
var builtins map[Symbol]value

func init() {
	builtins = map[Symbol]value{
		// Scheme core.
		"car": builtin(func(in *interp, a []value) (value, error) {
			l, err := in.nonEmpty(a, "car")
			if err != nil {
				return nil, err
			}
			return l[0], nil
		}),
		"cdr": builtin(func(in *interp, a []value) (value, error) {
			l, err := in.nonEmpty(a, "cdr")
			if err != nil {
				return nil, err
			}
			return l[1:], nil
		}),
		"cons": builtin(func(in *interp, a []value) (value, error) {
			if len(a) != 2 {
				return nil, in.errorf("cons takes 2 arguments")
			}
			l, ok := a[1].(list)
			if !ok {
				return nil, in.errorf("cons onto %s: only proper lists", describe(a[1]))
			}
			return append(list{a[0]}, l...), nil
		}),
		"list": builtin(func(_ *interp, a []value) (value, error) { return append(list{}, a...), nil }),
		"null?": builtin(func(in *interp, a []value) (value, error) {
			l, err := in.listArg(a, "null?")
			return err == nil && len(l) == 0, err
		}),
		"length": builtin(func(in *interp, a []value) (value, error) {
			l, err := in.listArg(a, "length")
			if err != nil {
				return nil, err
			}
			return in.konst(pps.FixedFromInt(len(l))), nil
		}),
		"equal?": builtin(func(in *interp, a []value) (value, error) {
			if len(a) != 2 {
				return nil, in.errorf("equal? takes 2 arguments")
			}
			return in.equalValues(a[0], a[1])
		}),
		"map": builtin(func(in *interp, a []value) (value, error) {
			if len(a) != 2 {
				return nil, in.errorf("map takes a procedure and a list")
			}
			l, ok := a[1].(list)
			if !ok {
				return nil, in.errorf("map over %s", describe(a[1]))
			}
			out := make(list, len(l))
			for i, x := range l {
				var err error
				if out[i], err = in.apply(a[0], []value{x}); err != nil {
					return nil, err
				}
			}
			return out, nil
		}),
		// (fold f l) as in Listing 1: f(l0, f(l1, … f(l_{n-2}, l_{n-1}))).
		"fold": builtin(func(in *interp, a []value) (value, error) {
			if len(a) != 2 {
				return nil, in.errorf("fold takes a procedure and a list")
			}
			l, err := in.nonEmpty(a[1:], "fold")
			if err != nil {
				return nil, err
			}
			acc := l[len(l)-1]
			for i := len(l) - 2; i >= 0; i-- {
				if acc, err = in.apply(a[0], []value{l[i], acc}); err != nil {
					return nil, err
				}
			}
			return acc, nil
		}),

		// Inputs (D9).
		"val":    builtin(func(in *interp, a []value) (value, error) { return in.inputArgs(a, "val", pps.Latest) }),
		"static": builtin(func(in *interp, a []value) (value, error) { return in.inputArgs(a, "static", pps.Static) }),
		"window": builtin(builtinWindow),
		"valid": builtin(func(in *interp, a []value) (value, error) {
			xs, err := in.numbers(a, 1, "valid")
			if err != nil {
				return nil, err
			}
			return secretBit{in.validity(xs[0])}, nil
		}),

		// Arithmetic (D1).
		"const": builtin(func(in *interp, a []value) (value, error) {
			xs, err := in.numbers(a, 1, "const")
			if err != nil {
				return nil, err
			}
			if xs[0].k == nil {
				return nil, in.errorf("const of a value not known at compile time")
			}
			return in.konst(*xs[0].k), nil
		}),
		"+":    variadic("+", pps.Fixed.Add, backend.add),
		"*":    variadic("*", pps.Fixed.Mul, backend.mul),
		"-":    builtin(builtinMinus),
		"/":    binary("/", pps.Fixed.Div, backend.div),
		"min2": binary("min2", pps.Min2, func(be backend, a, b num) num { return be.mux(be.less(b, a), b, a) }),
		"max2": binary("max2", pps.Max2, func(be backend, a, b num) num { return be.mux(be.less(a, b), b, a) }),
		"neg":  unary("neg", pps.Fixed.Neg, backend.neg),
		"abs":  unary("abs", pps.Fixed.Abs, backend.abs),
		"<":    compare("<", func(be backend, a, b num) bit { return be.less(a, b) }, func(a, b pps.Fixed) bool { return a < b }),
		">":    compare(">", func(be backend, a, b num) bit { return be.less(b, a) }, func(a, b pps.Fixed) bool { return a > b }),
		"<=":   compare("<=", func(be backend, a, b num) bit { return be.not(be.less(b, a)) }, func(a, b pps.Fixed) bool { return a <= b }),
		">=":   compare(">=", func(be backend, a, b num) bit { return be.not(be.less(a, b)) }, func(a, b pps.Fixed) bool { return a >= b }),
		"=":    compare("=", backend.equal, func(a, b pps.Fixed) bool { return a == b }),
		"mux":  builtin(builtinMux),

		// Statistics blocks.
		"sum":      listBlock("sum", blockSum),
		"mean":     listBlock("mean", blockMean),
		"min":      listBlock("min", func(in *interp, l []*number) *number { return in.extreme(l, true) }),
		"max":      listBlock("max", func(in *interp, l []*number) *number { return in.extreme(l, false) }),
		"variance": listBlock("variance", blockVariance),
		"count":    listBlock("count", func(in *interp, l []*number) *number { return in.countValid(l, nil) }),
		"argmin":   listBlock("argmin", func(in *interp, l []*number) *number { return in.argExtreme(l, true) }),
		"argmax":   listBlock("argmax", func(in *interp, l []*number) *number { return in.argExtreme(l, false) }),
		"linreg":   builtin(builtinLinreg),
		"r2":       builtin(builtinR2),

		"max-fixed": &number{n: nil, k: ptr(pps.MaxFixed)},
		"min-fixed": &number{n: nil, k: ptr(pps.MinFixed)},
	}
}

func ptr[T any](v T) *T { return &v }

func (in *interp) listArg(a []value, what string) (list, error) {
	if len(a) != 1 {
		return nil, in.errorf("%s takes one list", what)
	}
	l, ok := a[0].(list)
	if !ok {
		return nil, in.errorf("%s of %s", what, describe(a[0]))
	}
	return l, nil
}

func (in *interp) nonEmpty(a []value, what string) (list, error) {
	l, err := in.listArg(a, what)
	if err == nil && len(l) == 0 {
		err = in.errorf("%s of the empty list", what)
	}
	return l, err
}

func (in *interp) equalValues(x, y value) (value, error) {
	switch x := x.(type) {
	case list:
		y, ok := y.(list)
		if !ok || len(x) != len(y) {
			return false, nil
		}
		for i := range x {
			e, err := in.equalValues(x[i], y[i])
			if err != nil || e == false {
				return e, err
			}
		}
		return true, nil
	case *number:
		y, ok := y.(*number)
		if !ok {
			return false, nil
		}
		if x.k == nil || y.k == nil {
			return nil, in.errorf("equal? on secret numbers (use =)")
		}
		return *x.k == *y.k, nil
	case string, bool, Symbol:
		return x == y, nil
	}
	return nil, in.errorf("equal? on %s", describe(x))
}

// num returns the backend value of a number (constants such as max-fixed are materialised
// lazily).
func (in *interp) num(x *number) num {
	if x.n == nil {
		return in.be.konst(*x.k)
	}
	return x.n
}

func (in *interp) numbers(a []value, n int, what string) ([]*number, error) {
	if n >= 0 && len(a) != n {
		return nil, in.errorf("%s takes %d arguments, got %d", what, n, len(a))
	}
	out := make([]*number, len(a))
	for i, v := range a {
		x, ok := v.(*number)
		if !ok {
			return nil, in.errorf("%s of %s", what, describe(v))
		}
		out[i] = x
	}
	return out, nil
}

func (in *interp) inputArgs(a []value, what string, src pps.SlotSource) (value, error) {
	if len(a) < 1 || len(a) > 2 {
		return nil, in.errorf(`(%s "<topic>" [identity])`, what)
	}
	topic, ok := a[0].(string)
	if !ok || topic == "" {
		return nil, in.errorf("%s needs a topic string", what)
	}
	ident, err := in.identityArg(a[1:], what)
	if err != nil {
		return nil, err
	}
	return in.input(pps.SlotSpec{Topic: topic, Source: src, Identity: ident}), nil
}

func (in *interp) identityArg(a []value, what string) (pps.Fixed, error) {
	if len(a) == 0 {
		return 0, nil
	}
	x, ok := a[0].(*number)
	if !ok || x.k == nil {
		return 0, in.errorf("%s: the identity must be a compile-time number", what)
	}
	return *x.k, nil
}

func (in *interp) input(spec pps.SlotSpec) *number {
	s := len(in.slots)
	in.slots = append(in.slots, spec)
	n, v := in.be.input(s)
	return &number{n: n, valid: v, ident: ptr(spec.Identity)}
}

func builtinWindow(in *interp, a []value) (value, error) {
	if len(a) < 2 || len(a) > 3 {
		return nil, in.errorf(`(window "<topic>" N [identity])`)
	}
	topic, ok := a[0].(string)
	if !ok || topic == "" {
		return nil, in.errorf("window needs a topic string")
	}
	n, err := in.intArg(a[1], "window")
	if err != nil {
		return nil, err
	}
	if n == 0 || n > 1<<16 {
		return nil, in.errorf("window of %d values", n)
	}
	ident, err := in.identityArg(a[2:], "window")
	if err != nil {
		return nil, err
	}
	out := make(list, n)
	for i := range out {
		out[i] = in.input(pps.SlotSpec{Topic: topic, Source: pps.Window, Lag: i, Identity: ident})
	}
	return out, nil
}

type fixedOp2 func(a, b pps.Fixed) pps.Fixed

// binary builds a two-argument operation, computed at compile time when both are known.
func binary(what string, k fixedOp2, op func(be backend, a, b num) num) builtin {
	return func(in *interp, a []value) (value, error) {
		xs, err := in.numbers(a, 2, what)
		if err != nil {
			return nil, err
		}
		return in.op2(xs[0], xs[1], k, op), nil
	}
}

func (in *interp) op2(x, y *number, k fixedOp2, op func(be backend, a, b num) num) *number {
	if x.k != nil && y.k != nil {
		return in.konst(k(*x.k, *y.k))
	}
	return &number{n: op(in.be, in.num(x), in.num(y))}
}

func variadic(what string, k fixedOp2, op func(be backend, a, b num) num) builtin {
	return func(in *interp, a []value) (value, error) {
		xs, err := in.numbers(a, -1, what)
		if err != nil {
			return nil, err
		}
		if len(xs) < 2 {
			return nil, in.errorf("%s takes at least 2 arguments", what)
		}
		acc := xs[0]
		for _, x := range xs[1:] {
			acc = in.op2(acc, x, k, op)
		}
		return acc, nil
	}
}

func unary(what string, k func(pps.Fixed) pps.Fixed, op func(be backend, a num) num) builtin {
	return func(in *interp, a []value) (value, error) {
		xs, err := in.numbers(a, 1, what)
		if err != nil {
			return nil, err
		}
		if xs[0].k != nil {
			return in.konst(k(*xs[0].k)), nil
		}
		return &number{n: op(in.be, in.num(xs[0]))}, nil
	}
}

func builtinMinus(in *interp, a []value) (value, error) {
	if len(a) == 1 {
		return unary("-", pps.Fixed.Neg, backend.neg)(in, a)
	}
	return variadic("-", pps.Fixed.Sub, backend.sub)(in, a)
}

func compare(what string, op func(be backend, a, b num) bit, k func(a, b pps.Fixed) bool) builtin {
	return func(in *interp, a []value) (value, error) {
		xs, err := in.numbers(a, 2, what)
		if err != nil {
			return nil, err
		}
		if xs[0].k != nil && xs[1].k != nil {
			return k(*xs[0].k, *xs[1].k), nil // compile-time: usable by if
		}
		return secretBit{op(in.be, in.num(xs[0]), in.num(xs[1]))}, nil
	}
}

func (in *interp) bitOf(v value) (bit, bool) {
	switch v := v.(type) {
	case secretBit:
		return v.b, true
	case bool:
		return in.be.bitConst(v), true
	}
	return nil, false
}

// (mux c t f) is c ? t : f on secret c.
func builtinMux(in *interp, a []value) (value, error) {
	if len(a) != 3 {
		return nil, in.errorf("mux takes a condition and two numbers")
	}
	if b, ok := a[0].(bool); ok {
		if b {
			return a[1], nil
		}
		return a[2], nil
	}
	s, ok := in.bitOf(a[0])
	if !ok {
		return nil, in.errorf("mux on %s", describe(a[0]))
	}
	xs, err := in.numbers(a[1:], 2, "mux")
	if err != nil {
		return nil, err
	}
	return &number{n: in.be.mux(s, in.num(xs[0]), in.num(xs[1]))}, nil
}

func listBlock(what string, f func(in *interp, l []*number) *number) builtin {
	return func(in *interp, a []value) (value, error) {
		l, err := in.nonEmpty(a, what)
		if err != nil {
			return nil, err
		}
		xs, err := in.numbers(l, -1, what)
		if err != nil {
			return nil, err
		}
		return f(in, xs), nil
	}
}

// validity is the validity bit of x (constant 1 for computed values).
func (in *interp) validity(x *number) bit {
	if x.valid == nil {
		return in.be.bitConst(true)
	}
	return x.valid
}

// present is x where valid and fill where not, for blocks that treat nullified inputs as
// absent. It costs nothing when x is computed or its slot's hard-wired identity already is
// fill (D12), and 32 ANDs otherwise.
func (in *interp) present(x *number, v bit, fill pps.Fixed) *number {
	if x.valid == nil || (x.ident != nil && *x.ident == fill) {
		return x
	}
	if fill == 0 {
		return &number{n: in.be.mask(in.num(x), v)}
	}
	return &number{n: in.be.mux(v, in.num(x), in.be.konst(fill))}
}

func blockSum(in *interp, l []*number) *number {
	// Three terms or more on the circuit: one carry-save sum (multiAdder) of the terms not
	// known at compile time and the sum of those that are. Addition mod 2^32 is associative
	// and commutative, so the value is the fold's, which the model computes.
	if ma, ok := in.be.(multiAdder); ok {
		var k pps.Fixed
		var terms []num
		for _, x := range l {
			if x.k != nil {
				k = k.Add(*x.k)
			} else {
				terms = append(terms, in.num(x))
			}
		}
		if len(terms) > 2 {
			if k != 0 {
				terms = append(terms, in.be.konst(k))
			}
			return &number{n: ma.sumN(terms)}
		}
	}
	acc := l[0]
	for _, x := range l[1:] {
		acc = in.op2(acc, x, pps.Fixed.Add, backend.add)
	}
	return acc
}

// countValid counts the valid elements (pairwise with ys if given) as a Q24.8 integer.
func (in *interp) countValid(xs, ys []*number) *number {
	allKnown := true
	bits := make([]bit, len(xs))
	for i, x := range xs {
		if x.valid != nil || (ys != nil && ys[i].valid != nil) {
			allKnown = false
		}
		bits[i] = in.pairValid(x, ys, i)
	}
	if allKnown {
		return in.konst(pps.FixedFromInt(len(xs)))
	}
	return &number{n: in.be.count(bits)}
}

func (in *interp) pairValid(x *number, ys []*number, i int) bit {
	v := in.validity(x)
	if ys != nil && ys[i].valid != nil {
		if x.valid == nil {
			return ys[i].valid
		}
		v = in.be.and(v, ys[i].valid)
	}
	return v
}

// blockMean is Σx/n over the valid elements, dividing by the count of validity bits (D12).
func blockMean(in *interp, l []*number) *number {
	xs := make([]*number, len(l))
	for i, x := range l {
		xs[i] = in.present(x, in.validity(x), 0)
	}
	return in.op2(blockSum(in, xs), in.countValid(l, nil), pps.Fixed.Div, backend.div)
}

// extreme is min (or max) over the valid elements; a nullified element counts as MaxFixed
// (MinFixed), so it never wins.
func (in *interp) extreme(l []*number, isMin bool) *number {
	fill, k, op := pps.MaxFixed, fixedOp2(pps.Min2), func(be backend, a, b num) num { return be.mux(be.less(b, a), b, a) }
	if !isMin {
		fill, k, op = pps.MinFixed, pps.Max2, func(be backend, a, b num) num { return be.mux(be.less(a, b), b, a) }
	}
	acc := in.present(l[0], in.validity(l[0]), fill)
	for _, x := range l[1:] {
		acc = in.op2(acc, in.present(x, in.validity(x), fill), k, op)
	}
	return acc
}

// argExtreme is the index (as a Q24.8 integer) of the first minimum (maximum) of the valid
// elements.
func (in *interp) argExtreme(l []*number, isMin bool) *number {
	fill := pps.MaxFixed
	if !isMin {
		fill = pps.MinFixed
	}
	best := in.present(l[0], in.validity(l[0]), fill)
	idx := in.konst(0)
	for i, x := range l[1:] {
		x = in.present(x, in.validity(x), fill)
		var better bit
		if isMin {
			better = in.be.less(in.num(x), in.num(best))
		} else {
			better = in.be.less(in.num(best), in.num(x))
		}
		best = &number{n: in.be.mux(better, in.num(x), in.num(best))}
		idx = &number{n: in.be.mux(better, in.be.konst(pps.FixedFromInt(i+1)), in.num(idx))}
	}
	return idx
}

// blockVariance is D11's two-pass population variance (1/n)Σ(x−μ)² over the valid elements.
func blockVariance(in *interp, l []*number) *number {
	mu := blockMean(in, l)
	ds := make([]*number, len(l))
	for i, x := range l {
		d := in.op2(x, mu, pps.Fixed.Sub, backend.sub)
		d.valid, d.ident = x.valid, nil
		d = in.present(d, in.validity(x), 0)
		ds[i] = in.op2(d, d, pps.Fixed.Mul, backend.mul)
	}
	return in.op2(blockSum(in, ds), in.countValid(l, nil), pps.Fixed.Div, backend.div)
}

// pairs reads (xs ys) of equal length and masks each sample that is not valid in both to 0.
func (in *interp) pairs(a []value, what string) (xs, ys []*number, n *number, err error) {
	if len(a) != 2 {
		return nil, nil, nil, in.errorf("%s takes two lists", what)
	}
	lx, ok1 := a[0].(list)
	ly, ok2 := a[1].(list)
	if !ok1 || !ok2 || len(lx) != len(ly) || len(lx) == 0 {
		return nil, nil, nil, in.errorf("%s takes two non-empty lists of equal length", what)
	}
	rx, err := in.numbers(lx, -1, what)
	if err != nil {
		return nil, nil, nil, err
	}
	ry, err := in.numbers(ly, -1, what)
	if err != nil {
		return nil, nil, nil, err
	}
	xs, ys = make([]*number, len(rx)), make([]*number, len(ry))
	for i := range rx {
		v := in.pairValid(rx[i], ry, i)
		both := rx[i].valid == nil && ry[i].valid == nil
		xs[i], ys[i] = rx[i], ry[i]
		if !both {
			xs[i] = &number{n: in.be.mask(in.num(rx[i]), v)}
			ys[i] = &number{n: in.be.mask(in.num(ry[i]), v)}
			xs[i].valid, ys[i].valid = v, v
		}
	}
	return xs, ys, in.countValid(rx, ry), nil
}

func (in *interp) sumOf(xs []*number, f func(i int) *number) *number {
	terms := make([]*number, len(xs))
	for i := range xs {
		terms[i] = f(i)
	}
	return blockSum(in, terms)
}

// builtinLinreg is the closed-form OLS fit y = a·x + b of spec §4.2; it returns (a b).
func builtinLinreg(in *interp, a []value) (value, error) {
	xs, ys, n, err := in.pairs(a, "linreg")
	if err != nil {
		return nil, err
	}
	mul := func(p, q *number) *number { return in.op2(p, q, pps.Fixed.Mul, backend.mul) }
	sub := func(p, q *number) *number { return in.op2(p, q, pps.Fixed.Sub, backend.sub) }
	div := func(p, q *number) *number { return in.op2(p, q, pps.Fixed.Div, backend.div) }
	sx := blockSum(in, xs)
	sy := blockSum(in, ys)
	sxx := in.sumOf(xs, func(i int) *number { return mul(xs[i], xs[i]) })
	sxy := in.sumOf(xs, func(i int) *number { return mul(xs[i], ys[i]) })
	det := sub(mul(n, sxx), mul(sx, sx))
	slope := div(sub(mul(n, sxy), mul(sx, sy)), det)
	icept := div(sub(mul(sxx, sy), mul(sx, sxy)), det)
	return list{slope, icept}, nil
}

// builtinR2 is the squared Pearson correlation of spec §4.3 (erratum 2), computed as
// (cov/varx)·(cov/vary) so that Q24.8 does not overflow on cov².
func builtinR2(in *interp, a []value) (value, error) {
	xs, ys, n, err := in.pairs(a, "r2")
	if err != nil {
		return nil, err
	}
	mul := func(p, q *number) *number { return in.op2(p, q, pps.Fixed.Mul, backend.mul) }
	sub := func(p, q *number) *number { return in.op2(p, q, pps.Fixed.Sub, backend.sub) }
	div := func(p, q *number) *number { return in.op2(p, q, pps.Fixed.Div, backend.div) }
	mx, my := div(blockSum(in, xs), n), div(blockSum(in, ys), n)
	dx, dy := make([]*number, len(xs)), make([]*number, len(ys))
	for i := range xs {
		dx[i], dy[i] = sub(xs[i], mx), sub(ys[i], my)
		if xs[i].valid != nil {
			dx[i] = &number{n: in.be.mask(in.num(dx[i]), xs[i].valid)}
			dy[i] = &number{n: in.be.mask(in.num(dy[i]), xs[i].valid)}
		}
	}
	cov := in.sumOf(dx, func(i int) *number { return mul(dx[i], dy[i]) })
	vx := in.sumOf(dx, func(i int) *number { return mul(dx[i], dx[i]) })
	vy := in.sumOf(dy, func(i int) *number { return mul(dy[i], dy[i]) })
	return mul(div(cov, vx), div(cov, vy)), nil
}
