package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestReproducible builds the pda image twice into separate output directories (no cache
// shared, the binary re-linked) and checks that the digests are equal and that the image
// config runs the entrypoint as the non-root user. ~10 s with a warm Go build cache.
func TestReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program twice")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var c Component
	for _, cc := range Components(root) {
		if cc.Name == "pda" {
			c = cc
		}
	}
	var results []*Result
	for i := range 2 {
		b := &Builder{Root: root, Out: t.TempDir(), Epoch: time.Unix(0, 0).UTC(), Verify: i == 0, Log: t.Logf}
		r, err := b.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if results[0].Digest != results[1].Digest || results[0].ConfigDigest != results[1].ConfigDigest {
		t.Fatalf("not reproducible: %s/%s vs %s/%s", results[0].Digest, results[0].ConfigDigest, results[1].Digest, results[1].ConfigDigest)
	}
	if want := Registry + "/pda:" + results[0].Digest[len("sha256:"):][:12]; results[0].Image != want {
		t.Errorf("image %q, want %q", results[0].Image, want)
	}

	// The config as stored in the tarball.
	cfg := readConfig(t, results[1].Tarball, results[1].ConfigDigest)
	if cfg.Config.User != NonRoot {
		t.Errorf("user %q, want %q", cfg.Config.User, NonRoot)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/pda"}) {
		t.Errorf("entrypoint %q", cfg.Config.Entrypoint)
	}
	if cfg.Created != "1970-01-01T00:00:00Z" {
		t.Errorf("created %q, want the epoch", cfg.Created)
	}
}

type imageConfig struct {
	Created string `json:"created"`
	Config  struct {
		User       string   `json:"User"`
		Entrypoint []string `json:"Entrypoint"`
	} `json:"config"`
}

func readConfig(t *testing.T, tarball, digest string) imageConfig {
	t.Helper()
	fh, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	tr := tar.NewReader(fh)
	want := "blobs/sha256/" + digest[len("sha256:"):]
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s: no %s", tarball, want)
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name != want {
			continue
		}
		var cfg imageConfig
		if err := json.NewDecoder(tr).Decode(&cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
}
