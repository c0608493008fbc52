package dsl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("dsl: syntax error")

// MaxSourceBytes bounds a function's source: it arrives from the network at registration.
const MaxSourceBytes = 1 << 20

// maxNesting bounds the parser's recursion.
const maxNesting = 512

// Node is a parsed s-expression: Symbol, string, Number, bool or List.
type Node any

// Symbol is an identifier.
type Symbol string

// Number is a numeric literal as written; it becomes a Q24.8 constant when evaluated.
type Number struct {
	Text  string
	Value float64
}

// List is a parenthesised list; () is the empty list.
type List []Node

// Parse reads a program: one or more top-level forms (the paper's listings are each one
// `(begin ...)`; concatenated listings are several).
func Parse(src string) ([]Node, error) {
	if len(src) > MaxSourceBytes {
		return nil, fmt.Errorf("%w: source of %d bytes, at most %d", ErrSyntax, len(src), MaxSourceBytes)
	}
	p := &parser{src: src}
	var forms []Node
	for {
		p.skipSpace()
		if p.pos >= len(p.src) {
			break
		}
		n, err := p.node(0)
		if err != nil {
			return nil, err
		}
		forms = append(forms, n)
	}
	if len(forms) == 0 {
		return nil, fmt.Errorf("%w: empty program", ErrSyntax)
	}
	return forms, nil
}

type parser struct {
	src string
	pos int
}

func (p *parser) errorf(format string, a ...any) error {
	line := 1 + strings.Count(p.src[:min(p.pos, len(p.src))], "\n")
	return fmt.Errorf("%w: line %d: %s", ErrSyntax, line, fmt.Sprintf(format, a...))
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == ';':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		case isSpace(c):
			p.pos++
		default:
			return
		}
	}
}

// isSpace is what separates tokens. skipSpace and the atom scanner must agree: skipSpace
// skipped only ASCII space, tab and newlines while atoms also ended at \v, \f, U+0085 and
// U+00A0, so a source of "\v" reached the atom scanner with an empty token and panicked
// (found by FuzzCompile; testdata/fuzz/FuzzCompile).
func isSpace(c byte) bool { return unicode.IsSpace(rune(c)) }

func (p *parser) node(depth int) (Node, error) {
	if depth > maxNesting {
		return nil, p.errorf("nesting deeper than %d", maxNesting)
	}
	p.skipSpace()
	if p.pos >= len(p.src) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.src[p.pos]; c {
	case '(':
		p.pos++
		l := List{}
		for {
			p.skipSpace()
			if p.pos >= len(p.src) {
				return nil, p.errorf("missing )")
			}
			if p.src[p.pos] == ')' {
				p.pos++
				return l, nil
			}
			n, err := p.node(depth + 1)
			if err != nil {
				return nil, err
			}
			l = append(l, n)
		}
	case ')':
		return nil, p.errorf("unexpected )")
	case '\'':
		p.pos++
		n, err := p.node(depth + 1)
		if err != nil {
			return nil, err
		}
		return List{Symbol("quote"), n}, nil
	case '"':
		p.pos++
		var b strings.Builder
		for {
			if p.pos >= len(p.src) {
				return nil, p.errorf("unterminated string")
			}
			c := p.src[p.pos]
			p.pos++
			if c == '"' {
				return b.String(), nil
			}
			if c == '\\' {
				if p.pos >= len(p.src) {
					return nil, p.errorf("unterminated string")
				}
				c = p.src[p.pos]
				p.pos++
			}
			b.WriteByte(c)
		}
	}
	start := p.pos
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if c == '(' || c == ')' || c == '"' || c == ';' || c == '\'' || isSpace(c) {
			break
		}
		p.pos++
	}
	tok := p.src[start:p.pos]
	if tok == "" { // unreachable while skipSpace and the loop above agree on what a space is
		return nil, p.errorf("unexpected character %q", p.src[p.pos])
	}
	switch tok {
	case "#t":
		return true, nil
	case "#f":
		return false, nil
	}
	if c := tok[0]; c >= '0' && c <= '9' || (c == '-' || c == '+' || c == '.') && len(tok) > 1 && (tok[1] >= '0' && tok[1] <= '9' || tok[1] == '.') {
		v, err := strconv.ParseFloat(tok, 64)
		if err != nil {
			return nil, p.errorf("bad number %q", tok)
		}
		return Number{Text: tok, Value: v}, nil
	}
	return Symbol(tok), nil
}

// Canonical prints a program in one canonical form (single spaces, no comments): the
// function id hashes it, so formatting does not change a function's identity.
func Canonical(forms []Node) string {
	var b strings.Builder
	for i, f := range forms {
		if i > 0 {
			b.WriteByte('\n')
		}
		writeNode(&b, f)
	}
	return b.String()
}

func writeNode(b *strings.Builder, n Node) {
	switch n := n.(type) {
	case Symbol:
		b.WriteString(string(n))
	case string:
		b.WriteString(strconv.Quote(n))
	case Number:
		b.WriteString(strconv.FormatFloat(n.Value, 'g', -1, 64))
	case bool:
		if n {
			b.WriteString("#t")
		} else {
			b.WriteString("#f")
		}
	case List:
		b.WriteByte('(')
		for i, e := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			writeNode(b, e)
		}
		b.WriteByte(')')
	}
}
