// Command mkimage packages local files into a single-layer OCI image tarball (docker-archive
// format, which `ctr images import` and `docker load` accept) without Docker or a registry.
//
//	mkimage -tag localhost/obscura/pause:v1 -o pause.tar -entrypoint /pause /path/to/pause=/pause
//
// Each argument is SRC=DST (a file copied into the image at DST, mode kept). The image is
// linux/<GOARCH> with no base layer: put statically linked programs in it.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	tag := flag.String("tag", "", "image reference, e.g. localhost/obscura/pause:v1")
	out := flag.String("o", "", "output tarball")
	entrypoint := flag.String("entrypoint", "", "entrypoint, space separated")
	user := flag.String("user", "", "user (e.g. 65532:65532)")
	var env listFlag
	flag.Var(&env, "env", "KEY=VALUE (repeatable)")
	flag.Parse()
	if *tag == "" || *out == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*tag, *out, *entrypoint, *user, env, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(tag, out, entrypoint, user string, env, files []string) error {
	ref, err := name.NewTag(tag, name.WeakValidation)
	if err != nil {
		return err
	}
	layerTar, err := buildLayer(files)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	if entrypoint != "" {
		cf.Config.Entrypoint = strings.Fields(entrypoint)
	}
	cf.Config.User = user
	cf.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// buildLayer writes a reproducible tar (fixed times, root owner) holding the files and their
// parent directories.
func buildLayer(files []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	sort.Strings(files)
	for _, f := range files {
		src, dst, ok := strings.Cut(f, "=")
		if !ok || !strings.HasPrefix(dst, "/") {
			return nil, fmt.Errorf("argument %q: want SRC=/DST", f)
		}
		dst = strings.TrimPrefix(path.Clean(dst), "/")
		var parents []string
		for d := path.Dir(dst); d != "." && d != "/"; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				return nil, err
			}
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(src)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: dst, Mode: int64(st.Mode().Perm()), Size: int64(len(data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
