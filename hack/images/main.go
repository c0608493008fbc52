// Command images builds Obscura's container images offline and reproducibly (docs/images.md).
//
//	images build [-force] [-no-verify] [component ...]   build (or reuse) images into -out, write images.json
//	images list                                          print "component image tarball digest" per line of images.json
//
// Each image is a single-layer OCI image-layout tarball (out/<component>.tar) named
// localhost/obscura/<component>:<first 12 hex digits of its manifest digest>.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Index is images.json.
type Index struct {
	Registry   string             `json:"registry"`
	Components map[string]*Result `json:"components"`
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root")
	out := fs.String("out", "", "output directory (default <root>/hack/images/out)")
	force := fs.Bool("force", false, "rebuild even when the inputs have not changed")
	noVerify := fs.Bool("no-verify", false, "do not run each entrypoint from the extracted image")
	if len(args) == 0 {
		return fmt.Errorf("usage: images build|list [flags] [component ...]")
	}
	cmd := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Join(absRoot, "hack", "images", "out")
	}
	indexPath := filepath.Join(*out, "images.json")
	switch cmd {
	case "list":
		idx, err := readIndex(indexPath)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(idx.Components))
		for n := range idx.Components {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			r := idx.Components[n]
			fmt.Printf("%s %s %s %s\n", n, r.Image, filepath.Join(absRoot, r.Tarball), r.Digest)
		}
		return nil
	case "build":
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	epoch, err := EpochFromEnv()
	if err != nil {
		return err
	}
	b := &Builder{Root: absRoot, Out: *out, Epoch: epoch, Verify: !*noVerify, Force: *force,
		Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "[images] "+f+"\n", a...) }}
	all := Components(absRoot)
	want := map[string]bool{}
	for _, n := range fs.Args() {
		want[n] = true
	}
	idx, err := readIndex(indexPath)
	if err != nil {
		idx = &Index{}
	}
	idx.Registry = Registry
	if idx.Components == nil {
		idx.Components = map[string]*Result{}
	}
	t0 := time.Now()
	selected := len(want) > 0
	var failed []string
	for _, c := range all {
		if selected && !want[c.Name] {
			continue
		}
		delete(want, c.Name)
		r, err := b.Build(c)
		if err != nil {
			// Keep going: the other images (and the index) are still useful.
			b.logf("%-12s FAILED   %v", c.Name, err)
			failed = append(failed, c.Name)
			continue
		}
		idx.Components[c.Name] = r
	}
	for n := range want {
		return fmt.Errorf("unknown component %q", n)
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(indexPath+".tmp", append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(indexPath+".tmp", indexPath); err != nil {
		return err
	}
	b.logf("index: %s (%.1fs)", indexPath, time.Since(t0).Seconds())
	valuesPath := filepath.Join(*out, "values-images.yaml")
	if err := writeChartValues(valuesPath, idx); err != nil {
		return err
	}
	b.logf("chart values: %s (helm install -f it)", valuesPath)
	if len(failed) > 0 {
		return fmt.Errorf("failed: %v", failed)
	}
	return nil
}

func readIndex(p string) (*Index, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var idx Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &idx, nil
}

// chartImages maps the components the chart runs to their key under the chart's images value.
var chartImages = map[string]string{"operator": "operator", "obscura": "obscura", "mohito": "mohito", "pda": "pda",
	"pps": "pps", "lois": "lois", "sddr": "sddr", "nats-server": "nats", "redis": "redis", "envoy": "envoy"}

// writeChartValues writes the chart's images values for the images in idx, each pinned by
// repository, tag and digest, so `helm install -f <file>` runs exactly what was built (issue 19
// item 5: the NOTES' install path). Components the chart does not run are left out; a component
// not built keeps the chart's default.
func writeChartValues(path string, idx *Index) error {
	var keys []string
	for comp := range idx.Components {
		if _, ok := chartImages[comp]; ok {
			keys = append(keys, comp)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by `make images` (hack/images): the images built here, pinned by digest.\n")
	b.WriteString("# helm install obscura charts/obscura -f charts/obscura/values-local.yaml -f hack/images/out/values-images.yaml\n")
	b.WriteString("images:\n")
	for _, comp := range keys {
		r := idx.Components[comp]
		i := strings.LastIndex(r.Image, ":")
		if i < 0 {
			return fmt.Errorf("%s: image %q has no tag", comp, r.Image)
		}
		fmt.Fprintf(&b, "  %s: {repository: %s, tag: %q, digest: %q}\n", chartImages[comp], r.Image[:i], r.Image[i+1:], r.Digest)
	}
	if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
