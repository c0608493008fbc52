package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// builderVersion is part of every cache key: bump it when the image layout changes so that
// `make images` rebuilds everything.
const builderVersion = "obscura-images/1"

// Registry is the prefix of every image name. "localhost/" keeps the CRI from expanding the name
// to docker.io and matches the cluster's own images (localhost/obscura/pause).
const Registry = "localhost/obscura"

// NonRoot is the user every image runs as (distroless' "nonroot").
const NonRoot = "65532:65532"

// goLDFlags: stripped, and no Go build ID (it would differ between otherwise identical builds
// on some toolchains/paths).
const goLDFlags = "-s -w -buildid="

// Component is one image.
type Component struct {
	Name string
	// A static Go program: Module is the module directory (relative to the repo root), Pkg the
	// main package, Workspace whether the repo's go.work applies (else GOWORK=off).
	Module, Pkg string
	Workspace   bool
	// Or a binary of the host (Debian/PyPI), packaged with its loader and shared libraries.
	HostBin string
	// Dest is the binary's path in the image (the entrypoint).
	Dest string
	// Check is run against the extracted image (as NonRoot, in a chroot) and must exit 0.
	Check []string
}

// Components lists every image, in build order.
func Components(root string) []Component {
	envoy := filepath.Join(root, "bin", "envoy")
	return []Component{
		{Name: "operator", Module: "operators", Pkg: "./cmd", Workspace: true, Dest: "/usr/local/bin/operator", Check: []string{"-h"}},
		{Name: "obscura", Module: "services", Pkg: "./cmd/obscura", Workspace: true, Dest: "/usr/local/bin/obscura", Check: []string{"demo", "-h"}},
		{Name: "mohito", Module: "services", Pkg: "./cmd/mohito", Workspace: true, Dest: "/usr/local/bin/mohito", Check: []string{"loadgen", "-h"}},
		{Name: "pda", Module: "services", Pkg: "./cmd/pda", Workspace: true, Dest: "/usr/local/bin/pda", Check: []string{"demo", "-h"}},
		{Name: "pps", Module: "services", Pkg: "./cmd/pps", Workspace: true, Dest: "/usr/local/bin/pps", Check: []string{"garbler", "-h"}},
		{Name: "lois", Module: "services", Pkg: "./cmd/lois", Workspace: true, Dest: "/usr/local/bin/lois", Check: []string{"ci", "-h"}},
		{Name: "sddr", Module: "services", Pkg: "./cmd/sddr", Workspace: true, Dest: "/usr/local/bin/sddr", Check: []string{"mailbox", "-h"}},
		// nats-server under a supervisor that restarts it in place (services/cmd/nats-server): the
		// reloader's restarts are then no container exits and no crash-loop back-off.
		{Name: "nats-server", Module: "services", Pkg: "./cmd/nats-server", Workspace: true, Dest: "/usr/local/bin/nats-server", Check: []string{"--version"}},
		// cert-manager's controllers for self-signed and CA issuance (our main over the library).
		{Name: "cert-manager", Module: "hack/tools/cert-manager", Pkg: "./cmd/cert-manager-controller", Dest: "/usr/local/bin/cert-manager-controller", Check: []string{"--version"}},
		{Name: "redis", HostBin: "/usr/bin/redis-server", Dest: "/usr/local/bin/redis-server", Check: []string{"--version"}},
		{Name: "envoy", HostBin: envoy, Dest: "/usr/local/bin/envoy", Check: []string{"--version"}},
		// Vault (bin/vault, built by hack/tools.sh from Go modules with cgo): the cluster e2e's
		// dev server, which the workloads read keys from through the Kubernetes auth method.
		{Name: "vault", HostBin: filepath.Join(root, "bin", "vault"), Dest: "/usr/local/bin/vault", Check: []string{"version"}},
	}
}

// Result is one component's entry in images.json.
type Result struct {
	// Image is the name to use in a pod: Registry/<name>:<first 12 hex of the digest>.
	Image string `json:"image"`
	// Digest is the OCI manifest digest, which `ctr images import` keeps.
	Digest string `json:"digest"`
	// Ref pins both: Image@Digest.
	Ref          string   `json:"ref"`
	ConfigDigest string   `json:"configDigest"`
	Tarball      string   `json:"tarball"` // relative to the repo root
	Size         int64    `json:"size"`    // compressed layer bytes
	Uncompressed int64    `json:"uncompressedSize"`
	Entrypoint   []string `json:"entrypoint"`
	User         string   `json:"user"`
	Key          string   `json:"inputKey"` // hash of the inputs: the cache key
}

// Builder builds images into Out.
type Builder struct {
	Root, Out string
	Epoch     time.Time // SOURCE_DATE_EPOCH, or the Unix epoch
	Verify    bool
	Force     bool
	Log       func(format string, args ...any)
}

func (b *Builder) logf(format string, args ...any) {
	if b.Log != nil {
		b.Log(format, args...)
	}
}

// file is one regular file of the layer.
type file struct {
	src, dst string
	mode     int64
}

// Build builds one component (or reuses the cached result) and returns its entry.
func (b *Builder) Build(c Component) (*Result, error) {
	t0 := time.Now()
	if err := os.MkdirAll(filepath.Join(b.Out, "cache"), 0o755); err != nil {
		return nil, err
	}
	var bin string
	var key string
	var err error
	if c.Module != "" {
		key, err = b.goKey(c)
	} else {
		bin, err = filepath.EvalSymlinks(c.HostBin)
		if err == nil {
			key, err = b.hostKey(c, bin)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: inputs: %w", c.Name, err)
	}
	tarPath := filepath.Join(b.Out, c.Name+".tar")
	metaPath := filepath.Join(b.Out, "cache", c.Name+".json")
	if !b.Force {
		if r, err := readResult(metaPath); err == nil && r.Key == key {
			if _, err := os.Stat(tarPath); err == nil {
				b.logf("%-12s cached   %s (%s)", c.Name, r.Image, mib(r.Size))
				return r, nil
			}
		}
	}
	if c.Module != "" {
		bin = filepath.Join(b.Out, "cache", "bin", c.Name)
		if err := b.goBuild(c, bin); err != nil {
			return nil, fmt.Errorf("%s: go build: %w", c.Name, err)
		}
	}
	files, err := imageFiles(c, bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Name, err)
	}
	layerTar, err := b.layer(files)
	if err != nil {
		return nil, fmt.Errorf("%s: layer: %w", c.Name, err)
	}
	img, err := b.image(c, layerTar)
	if err != nil {
		return nil, fmt.Errorf("%s: image: %w", c.Name, err)
	}
	if b.Verify {
		if err := verify(c, layerTar); err != nil {
			return nil, fmt.Errorf("%s: verify: %w", c.Name, err)
		}
	}
	r, err := b.write(c, img, tarPath)
	if err != nil {
		return nil, fmt.Errorf("%s: write: %w", c.Name, err)
	}
	r.Key = key
	r.Uncompressed = int64(len(layerTar))
	data, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(metaPath, append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	b.logf("%-12s built    %s (%s, %s uncompressed) in %.1fs", c.Name, r.Image, mib(r.Size), mib(r.Uncompressed), time.Since(t0).Seconds())
	return r, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func readResult(p string) (*Result, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var r Result
	return &r, json.Unmarshal(data, &r)
}

// goEnv is the environment of every Go build and `go list`.
func (b *Builder) goEnv(c Component) []string {
	env := os.Environ()
	work := "off"
	if c.Workspace {
		work = filepath.Join(b.Root, "go.work")
	}
	return append(env, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOWORK="+work,
		"GOFLAGS=-buildvcs=false -mod=readonly")
}

func goFlags() []string {
	return []string{"-trimpath", "-buildvcs=false", "-ldflags=" + goLDFlags}
}

// goKey hashes what the Go program's binary depends on: the toolchain, the flags and the build ID
// of every package it links (a package's build ID covers its compiled object, so any source or
// dependency change shows). Compiling for `go list -export` fills the same build cache `go build`
// uses, so this costs little.
func (b *Builder) goKey(c Component) (string, error) {
	args := append([]string{"list", "-deps", "-export", "-f", "{{.ImportPath}} {{.BuildID}}"}, goFlags()...)
	cmd := exec.Command("go", append(args, c.Pkg)...)
	cmd.Dir = filepath.Join(b.Root, c.Module)
	cmd.Env = b.goEnv(c)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list: %v: %s", err, stderr.String())
	}
	ver, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%q\n%s\n%s\n", builderVersion, c.spec(), goFlags(), strings.TrimSpace(string(ver)), b.Epoch.UTC().Format(time.RFC3339))
	h.Write(out)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// hostKey hashes the host binary and every library it loads.
func (b *Builder) hostKey(c Component, bin string) (string, error) {
	files, err := imageFiles(c, bin)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", builderVersion, c.spec(), b.Epoch.UTC().Format(time.RFC3339))
	for _, f := range files {
		fmt.Fprintf(h, "%s %o\n", f.dst, f.mode)
		if f.src == "" {
			continue
		}
		fh, err := os.Open(f.src)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", err
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func (c Component) spec() string {
	return fmt.Sprintf("%s|%s|%s|%v|%s|%s|%q|%s", c.Name, c.Module, c.Pkg, c.Workspace, c.HostBin, c.Dest, c.Check, NonRoot)
}

func (b *Builder) goBuild(c Component, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-o", out}, goFlags()...)
	cmd := exec.Command("go", append(args, c.Pkg)...)
	cmd.Dir = filepath.Join(b.Root, c.Module)
	cmd.Env = b.goEnv(c)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return err
	}
	if dyn, err := dynamic(out); err != nil || dyn {
		return fmt.Errorf("%s is not a static binary (err %v)", out, err)
	}
	return nil
}

// dynamic reports whether an ELF file has a program interpreter.
func dynamic(p string) (bool, error) {
	f, err := elf.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// Minimal account files: some libraries look the running user up.
var (
	etcPasswd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	etcGroup  = "root:x:0:\nnonroot:x:65532:\n"
)

// imageFiles lists the layer's regular files: the binary at c.Dest and, when it is dynamically
// linked, the dynamic loader and every library ldd reports, each at the path ldd prints (content
// from the symlink's target).
func imageFiles(c Component, bin string) ([]file, error) {
	st, err := os.Stat(bin)
	if err != nil {
		return nil, err
	}
	files := []file{{src: bin, dst: c.Dest, mode: int64(st.Mode().Perm() | 0o555)}}
	dyn, err := dynamic(bin)
	if err != nil {
		return nil, err
	}
	if dyn {
		libs, err := lddPaths(bin)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			real, err := filepath.EvalSymlinks(lib)
			if err != nil {
				return nil, err
			}
			st, err := os.Stat(real)
			if err != nil {
				return nil, err
			}
			files = append(files, file{src: real, dst: lib, mode: int64(st.Mode().Perm())})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].dst < files[j].dst })
	return files, nil
}

func lddPaths(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	seen := map[string]bool{}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") && !seen[f] {
				seen[f] = true
				libs = append(libs, f)
			}
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s: no libraries in %q", bin, out)
	}
	return libs, nil
}

// layer writes a reproducible tar: entries sorted by path, parents first, owner root, times
// fixed at the epoch, no user/group names, plus /etc/passwd, /etc/group and /tmp (1777).
func (b *Builder) layer(files []file) ([]byte, error) {
	type entry struct {
		hdr  *tar.Header
		src  string
		data []byte
	}
	entries := map[string]*entry{}
	addDirs := func(p string) {
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			name := strings.TrimPrefix(d, "/") + "/"
			if entries[name] == nil {
				entries[name] = &entry{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
			}
		}
	}
	for _, f := range files {
		addDirs(f.dst)
		st, err := os.Stat(f.src)
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(f.dst, "/")
		entries[name] = &entry{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: f.mode, Size: st.Size()}, src: f.src}
	}
	for p, content := range map[string]string{"/etc/passwd": etcPasswd, "/etc/group": etcGroup} {
		addDirs(p)
		name := strings.TrimPrefix(p, "/")
		entries[name] = &entry{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}, data: []byte(content)}
	}
	entries["tmp/"] = &entry{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		e.hdr.ModTime = b.Epoch
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(e.hdr); err != nil {
			return nil, err
		}
		switch {
		case e.data != nil:
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		case e.src != "":
			fh, err := os.Open(e.src)
			if err != nil {
				return nil, err
			}
			n, err := io.Copy(tw, fh)
			fh.Close()
			if err != nil {
				return nil, err
			}
			if n != e.hdr.Size {
				return nil, fmt.Errorf("%s changed while packing", e.src)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// image wraps the layer into a single-layer OCI image (gzip, fixed header) with the entrypoint,
// the non-root user and fixed timestamps.
func (b *Builder) image(c Component, layerTar []byte) (v1.Image, error) {
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	// gzip.Writer leaves ModTime/Name empty: the header is constant.
	if _, err := zw.Write(layerTar); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	compressed := gz.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: b.Epoch}, CreatedBy: builderVersion + " " + c.Name, Comment: "hack/images"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: b.Epoch}
	cf.Config.Entrypoint = []string{c.Dest}
	cf.Config.User = NonRoot
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":  "obscura/" + c.Name,
		"org.opencontainers.image.source": "hack/images",
	}
	return mutate.ConfigFile(img, cf)
}

// write stores the image as an OCI image-layout tarball (what `ctr images import` reads, keeping
// the manifest digest) named Registry/<name>:<short digest>.
func (b *Builder) write(c Component, img v1.Image, tarPath string) (*Result, error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	configDigest, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		return nil, fmt.Errorf("want one layer: %v", err)
	}
	layerDigest, err := layers[0].Digest()
	if err != nil {
		return nil, err
	}
	lr, err := layers[0].Compressed()
	if err != nil {
		return nil, err
	}
	layerData, err := io.ReadAll(lr)
	lr.Close()
	if err != nil {
		return nil, err
	}
	image := fmt.Sprintf("%s/%s:%s", Registry, c.Name, digest.Hex[:12])
	index := map[string]any{
		"schemaVersion": 2,
		"mediaType":     string(types.OCIImageIndex),
		"manifests": []map[string]any{{
			"mediaType": string(types.OCIManifestSchema1),
			"digest":    digest.String(),
			"size":      len(manifest),
			"platform":  map[string]string{"os": "linux", "architecture": runtime.GOARCH},
			"annotations": map[string]string{
				"io.containerd.image.name":          image,
				"org.opencontainers.image.ref.name": image,
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return nil, err
	}
	type blob struct {
		name string
		data []byte
	}
	blobs := []blob{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
		{"blobs/", nil},
		{"blobs/sha256/", nil},
		{"blobs/sha256/" + configDigest.Hex, config},
		{"blobs/sha256/" + layerDigest.Hex, layerData},
		{"blobs/sha256/" + digest.Hex, manifest},
	}
	sort.SliceStable(blobs, func(i, j int) bool { return blobs[i].name < blobs[j].name })
	tmp := tarPath + ".tmp"
	fh, err := os.Create(tmp)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(fh)
	for _, bl := range blobs {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: bl.name, Mode: 0o644, Size: int64(len(bl.data)), ModTime: b.Epoch, Format: tar.FormatPAX}
		if strings.HasSuffix(bl.name, "/") {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			fh.Close()
			return nil, err
		}
		if _, err := tw.Write(bl.data); err != nil {
			fh.Close()
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		fh.Close()
		return nil, err
	}
	if err := fh.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, tarPath); err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(b.Root, tarPath)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = tarPath
	}
	return &Result{
		Image: image, Digest: digest.String(), Ref: image + "@" + digest.String(),
		ConfigDigest: configDigest.String(), Tarball: rel, Size: int64(len(layerData)),
		Entrypoint: []string{c.Dest}, User: NonRoot,
	}, nil
}

// verify extracts the layer into a temporary directory and runs the entrypoint with c.Check in
// it: chrooted as the non-root user when running as root, else (dynamic binaries) through the
// image's own loader with the image's library directories. No network is involved.
func verify(c Component, layerTar []byte) error {
	dir, err := os.MkdirTemp("", "obscura-image-"+c.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(bytes.NewReader(layerTar))
	var libDirs []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(hdr.Mode)&os.ModePerm|modeSticky(hdr.Mode)); err != nil {
				return err
			}
		case tar.TypeReg:
			fh, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode)&os.ModePerm)
			if err != nil {
				return err
			}
			_, err = io.Copy(fh, tr)
			fh.Close()
			if err != nil {
				return err
			}
			if strings.Contains(hdr.Name, ".so") {
				libDirs = append(libDirs, filepath.Dir(p))
			}
		}
	}
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		uid, gid := uint32(65532), uint32(65532)
		cmd = exec.Command(c.Dest, c.Check...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"}
	} else {
		bin := filepath.Join(dir, c.Dest)
		loader := ""
		if dyn, _ := dynamic(bin); dyn {
			loader = filepath.Join(dir, "lib64", "ld-linux-x86-64.so.2")
		}
		if loader != "" {
			cmd = exec.Command(loader, append([]string{"--library-path", strings.Join(uniq(libDirs), ":"), bin}, c.Check...)...)
		} else {
			cmd = exec.Command(bin, c.Check...)
		}
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", c.Dest, strings.Join(c.Check, " "), err, out)
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return fmt.Errorf("%s %s printed nothing", c.Dest, strings.Join(c.Check, " "))
	}
	return nil
}

func modeSticky(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

func uniq(s []string) []string {
	sort.Strings(s)
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// EpochFromEnv is SOURCE_DATE_EPOCH, or the Unix epoch.
func EpochFromEnv() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}
