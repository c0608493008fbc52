package monitoring

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/obscura-iot/obscura/services/testenv"
)

// codeMetric is one metric a Go file registers.
type codeMetric struct {
	name, kind string // kind: counter, gauge, histogram, summary
	pos        string // file:line of its Opts
}

// optsKinds maps client_golang's option types to the metric type.
var optsKinds = map[string]string{"CounterOpts": "counter", "GaugeOpts": "gauge", "HistogramOpts": "histogram", "SummaryOpts": "summary"}

const modulePrefix = "github.com/obscura-iot/obscura/"

// codeMetrics parses every non-test Go file of services/ and operators/ and returns every metric
// declared through prometheus.{Counter,Gauge,Histogram,Summary}Opts. Names are string literals,
// constants (also of other packages of this repository), or a parameter of a local helper
// closure (`gauge := func(name, ...) { ...GaugeOpts{Name: name} }`), resolved at its calls.
func codeMetrics(t *testing.T, root string) []codeMetric {
	t.Helper()
	fset := token.NewFileSet()
	files := map[string][]*ast.File{} // by directory relative to root
	for _, top := range []string{"services", "operators"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			files[rel] = append(files[rel], f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// String constants by package directory.
	consts := map[string]map[string]string{}
	for dir, fs := range files {
		consts[dir] = map[string]string{}
		for _, f := range fs {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								consts[dir][n.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
		}
	}
	var out []codeMetric
	for dir, fs := range files {
		for _, f := range fs {
			imports := map[string]string{} // local name -> directory
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				if !strings.HasPrefix(path, modulePrefix) {
					continue
				}
				name := filepath.Base(path)
				if im.Name != nil {
					name = im.Name.Name
				}
				imports[name] = strings.TrimPrefix(path, modulePrefix)
			}
			resolve := func(e ast.Expr) (string, bool) {
				switch v := e.(type) {
				case *ast.BasicLit:
					s, err := strconv.Unquote(v.Value)
					return s, err == nil
				case *ast.Ident:
					s, ok := consts[dir][v.Name]
					return s, ok
				case *ast.SelectorExpr:
					if x, ok := v.X.(*ast.Ident); ok {
						s, ok := consts[imports[x.Name]][v.Sel.Name]
						return s, ok
					}
				}
				return "", false
			}
			// helpers: closure variable -> (index of the name parameter, kind).
			type helper struct {
				param int
				kind  string
			}
			helpers := map[string]helper{}
			helperParams := map[string]bool{}
			ast.Inspect(f, func(n ast.Node) bool {
				as, ok := n.(*ast.AssignStmt)
				if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
					return true
				}
				fl, ok := as.Rhs[0].(*ast.FuncLit)
				id, ok2 := as.Lhs[0].(*ast.Ident)
				if !ok || !ok2 {
					return true
				}
				var params []string
				for _, fld := range fl.Type.Params.List {
					for _, n := range fld.Names {
						params = append(params, n.Name)
					}
				}
				ast.Inspect(fl.Body, func(n ast.Node) bool {
					if kind, name, ok := optsName(n); ok {
						if pid, ok := name.(*ast.Ident); ok {
							if i := slices.Index(params, pid.Name); i >= 0 {
								helpers[id.Name] = helper{i, kind}
								helperParams[pid.Name] = true
							}
						}
					}
					return true
				})
				return true
			})
			ast.Inspect(f, func(n ast.Node) bool {
				if kind, name, ok := optsName(n); ok {
					if s, ok := resolve(name); ok {
						out = append(out, codeMetric{s, kind, position(fset, root, n.Pos())})
					} else if id, isIdent := name.(*ast.Ident); !isIdent || !helperParams[id.Name] {
						t.Errorf("%s: metric name %s is not a constant this test can resolve", position(fset, root, n.Pos()), exprString(name))
					}
				}
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok {
						if h, ok := helpers[id.Name]; ok && h.param < len(c.Args) {
							if s, ok := resolve(c.Args[h.param]); ok {
								out = append(out, codeMetric{s, h.kind, position(fset, root, c.Pos())})
							} else {
								t.Errorf("%s: metric name %s not resolvable", position(fset, root, c.Pos()), exprString(c.Args[h.param]))
							}
						}
					}
				}
				return true
			})
		}
	}
	slices.SortFunc(out, func(a, b codeMetric) int { return strings.Compare(a.name, b.name) })
	return out
}

// optsName matches prometheus.XOpts{Name: ...} and returns the kind and the Name expression.
func optsName(n ast.Node) (string, ast.Expr, bool) {
	cl, ok := n.(*ast.CompositeLit)
	if !ok {
		return "", nil, false
	}
	sel, ok := cl.Type.(*ast.SelectorExpr)
	if !ok {
		return "", nil, false
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "prometheus" {
		return "", nil, false
	}
	kind, ok := optsKinds[sel.Sel.Name]
	if !ok {
		return "", nil, false
	}
	for _, e := range cl.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		if k, ok := kv.Key.(*ast.Ident); ok {
			switch k.Name {
			case "Name":
				return kind, kv.Value, true
			}
		}
	}
	return "", nil, false
}

func position(fset *token.FileSet, root string, p token.Pos) string {
	pos := fset.Position(p)
	rel, _ := filepath.Rel(root, pos.Filename)
	return fmt.Sprintf("%s:%d", rel, pos.Line)
}

func exprString(e ast.Expr) string {
	switch v := e.(type) {
	case *ast.Ident:
		return v.Name
	case *ast.SelectorExpr:
		return exprString(v.X) + "." + v.Sel.Name
	}
	return fmt.Sprintf("%T", e)
}

// docRow is one row of the metrics table of docs/metrics.md.
type docRow struct{ name, kind string }

var docRowRE = regexp.MustCompile("^\\| `([a-z_:][a-z0-9_:]*)` \\| (counter|gauge|histogram|summary) \\|")

// docMetrics reads the table rows of docs/metrics.md ("| `name` | type | ...").
func docMetrics(t *testing.T, root string) (map[string]docRow, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]docRow{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if m := docRowRE.FindStringSubmatch(sc.Text()); m != nil {
			if _, dup := rows[m[1]]; dup {
				t.Errorf("docs/metrics.md: %s listed twice", m[1])
			}
			rows[m[1]] = docRow{m[1], m[2]}
		}
	}
	return rows, string(b)
}

// Every metric the code registers has one row in docs/metrics.md with its type, and every row
// names a metric the code registers: the table cannot drift from the code.
func TestMetricsDocMatchesCode(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	code := codeMetrics(t, root)
	if len(code) < 50 {
		t.Fatalf("found only %d metrics in the code: the scan is broken", len(code))
	}
	doc, _ := docMetrics(t, root)
	seen := map[string]bool{}
	for _, m := range code {
		if seen[m.name] {
			continue // one name registered in two places (same metric, other role)
		}
		seen[m.name] = true
		r, ok := doc[m.name]
		switch {
		case !ok:
			t.Errorf("%s: metric %s (%s) is missing from docs/metrics.md", m.pos, m.name, m.kind)
		case r.kind != m.kind:
			t.Errorf("docs/metrics.md: %s is a %s in the code (%s), the doc says %s", m.name, m.kind, m.pos, r.kind)
		}
	}
	for name := range doc {
		if !seen[name] {
			t.Errorf("docs/metrics.md lists %s, which no code registers", name)
		}
	}
}

var (
	nameRE       = regexp.MustCompile(`^(mohito|pda|pps|lois|sddr|obscura)_[a-z][a-z0-9_]*[a-z0-9]$`)
	nonBaseUnits = regexp.MustCompile(`_(ms|milliseconds|microseconds|us|ns|nanoseconds|minutes|hours|days|kb|mb|kilobytes|megabytes|percent)(_|$)`)
)

// namingProblems are the Prometheus naming rules (prometheus.io/docs/practices/naming): a
// system prefix, counters end in _total and nothing else does, base units, histograms of
// latency or size end in their unit.
func namingProblems(m codeMetric) []string {
	var p []string
	if !nameRE.MatchString(m.name) {
		p = append(p, "not <system>_<snake_case> (system: mohito, pda, pps, lois, sddr, obscura)")
	}
	if m.kind == "counter" && !strings.HasSuffix(m.name, "_total") {
		p = append(p, "counter without _total")
	}
	if m.kind != "counter" && strings.HasSuffix(m.name, "_total") {
		p = append(p, m.kind+" ending in _total")
	}
	if nonBaseUnits.MatchString(m.name) {
		p = append(p, "not in a base unit (seconds, bytes, ratio)")
	}
	if (m.kind == "histogram" || m.kind == "summary") && !strings.HasSuffix(m.name, "_seconds") && !strings.HasSuffix(m.name, "_bytes") {
		p = append(p, m.kind+" without a unit suffix (_seconds, _bytes)")
	}
	return p
}

// Every metric follows the naming rules, or docs/metrics.md records it as a finding (a line of
// the Findings section naming it): known exceptions are listed, new ones fail.
func TestMetricNamesFollowConventions(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	_, text := docMetrics(t, root)
	_, findings, ok := strings.Cut(text, "\n## Findings")
	if !ok {
		t.Fatal("docs/metrics.md has no Findings section")
	}
	for _, m := range codeMetrics(t, root) {
		if p := namingProblems(m); len(p) > 0 && !strings.Contains(findings, "`"+m.name+"`") {
			t.Errorf("%s: %s: %s (fix it, or record it under Findings in docs/metrics.md)", m.pos, m.name, strings.Join(p, "; "))
		}
	}
}

// The audit itself flags what it claims to.
func TestNamingProblemsDetects(t *testing.T) {
	for _, c := range []struct {
		m   codeMetric
		bad bool
	}{
		{codeMetric{name: "mohito_rounds_total", kind: "counter"}, false},
		{codeMetric{name: "mohito_rounds", kind: "counter"}, true},
		{codeMetric{name: "mohito_lag_total", kind: "gauge"}, true},
		{codeMetric{name: "mohito_stage_ms", kind: "histogram"}, true},
		{codeMetric{name: "mohito_stage_latency", kind: "histogram"}, true},
		{codeMetric{name: "pps_broker_execution_phase_seconds", kind: "histogram"}, false},
		{codeMetric{name: "RoundsTotal", kind: "counter"}, true},
		{codeMetric{name: "envoy_rounds_total", kind: "counter"}, true},
	} {
		if got := len(namingProblems(c.m)) > 0; got != c.bad {
			t.Errorf("%s (%s): flagged %v, want %v", c.m.name, c.m.kind, got, c.bad)
		}
	}
}

// Every metric an alerting rule queries is registered by the code, or is a proposed metric
// recorded under Findings (its rule stays silent until the code exports it).
func TestRulesQueryExistingMetrics(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	_, text := docMetrics(t, root)
	_, findings, _ := strings.Cut(text, "\n## Findings")
	known := map[string]bool{"up": true}
	for _, m := range codeMetrics(t, root) {
		known[m.name] = true
		if m.kind == "histogram" {
			known[m.name+"_bucket"], known[m.name+"_sum"], known[m.name+"_count"] = true, true, true
		}
	}
	for sys, file := range ruleFiles(t) {
		for _, expr := range ruleExprs(file) {
			// Label names (in selectors and grouping clauses) are not metrics.
			expr = selectorRE.ReplaceAllString(groupingRE.ReplaceAllString(expr, ""), "")
			for _, name := range metricRE.FindAllString(expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				if !known[name] && !strings.Contains(findings, "`"+base+"`") {
					t.Errorf("rules/%s.yaml queries %s, which no code registers (and no finding proposes)", sys, name)
				}
			}
		}
	}
}

var (
	metricRE   = regexp.MustCompile(`\b(mohito|pda|pps|lois|obscura)_[a-z0-9_]+\b`)
	selectorRE = regexp.MustCompile(`\{[^}]*\}`)
	groupingRE = regexp.MustCompile(`\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)`)
)

func ruleExprs(file map[string]any) []string {
	var out []string
	groups, _ := file["groups"].([]any)
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			if e, ok := r.(map[string]any)["expr"].(string); ok {
				out = append(out, e)
			}
		}
	}
	return out
}
