package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// modules whose go.mod and go.sum make up the build cache key, in key order.
var modules = []string{"etcd", "kubernetes", "kwok", "helm"}

// binary is one program of the build.
type binary struct {
	name   string // file name under bin/
	dir    string // module dir under tools/realcluster
	pkg    string // main package
	module string // module whose version it reports
}

var binaries = []binary{
	{"etcd", "etcd", "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/server/v3"},
	{"kube-apiserver", "kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes"},
	{"kube-controller-manager", "kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager", "k8s.io/kubernetes"},
	{"kube-scheduler", "kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes"},
	{"kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", "sigs.k8s.io/kwok"},
	{"helm", "helm", "helm.sh/helm/v3/cmd/helm", "helm.sh/helm/v3"},
}

// kwokShare are the files of the sigs.k8s.io/kwok module copied to
// share/kwok/: the stages up configures and the Exec CRD.
var kwokShare = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
	"kustomize/crd/bases/kwok.x-k8s.io_execs.yaml",
}

// buildKey names the cache directory of one build.
type buildKey struct {
	goVersion             string
	k8s, etcd, kwok, helm string // module versions
	key, keyDir, bin      string
}

// findGo sets l.goBin: $GO, else go on PATH, else /usr/local/go/bin/go.
func (l *lane) findGo() {
	if g := os.Getenv("GO"); g != "" {
		if _, err := exec.LookPath(g); err != nil {
			die("GO=%s is not executable", g)
		}
		l.goBin = g
		return
	}
	if _, err := exec.LookPath("go"); err == nil {
		l.goBin = "go"
		return
	}
	if st, err := os.Stat("/usr/local/go/bin/go"); err == nil && st.Mode()&0o111 != 0 {
		l.goBin = "/usr/local/go/bin/go"
		return
	}
	die("no Go toolchain: put go on PATH or set GO=/path/to/go (go.mod files need Go >= 1.26)")
}

// modVersion returns the version gomod requires of module: the first line
// "<module> <version>" (inside a require block) or "require <module>
// <version>", as the former awk one-liner read it.
func modVersion(gomod []byte, module string) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
		if len(f) >= 2 && f[0] == "require" && f[1] == module {
			if len(f) >= 3 {
				return f[2]
			}
			return ""
		}
	}
	return ""
}

func (l *lane) modVersion(dir, module string) string {
	p := filepath.Join(l.tools, dir, "go.mod")
	b, err := os.ReadFile(p)
	if err != nil {
		die("%v", err)
	}
	v := modVersion(b, module)
	if v == "" {
		die("%s does not require %s", p, module)
	}
	return v
}

// cacheSum is the hash part of the key: sha256 over the recipe, the Go
// version and the go.mod and go.sum of each module, first 12 hex digits.
// It must stay byte-for-byte what the shell version hashed, or every cached
// build would be orphaned.
func cacheSum(recipe, goVersion string, read func(dir, file string) ([]byte, error)) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "recipe %s\ngo %s\n", recipe, goVersion)
	for _, d := range modules {
		for _, f := range []string{"go.mod", "go.sum"} {
			b, err := read(d, f)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "== %s/%s\n", d, f)
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

func cacheKey(k8s, etcd, kwok, helm, goVersion, sum string) string {
	return fmt.Sprintf("k8s-%s_etcd-%s_kwok-%s_helm-%s_%s_%s", k8s, etcd, kwok, helm, goVersion, sum)
}

// helmOnlyKey names the Helm-alone build: its version, the Go version and
// the helm module's go.mod and go.sum.
func helmOnlyKey(helmVersion, goVersion string, gomod, gosum []byte) string {
	h := sha256.New()
	h.Write(gomod)
	h.Write(gosum)
	return fmt.Sprintf("helm-%s_%s_%s", helmVersion, goVersion, hex.EncodeToString(h.Sum(nil))[:12])
}

func (l *lane) goVersion() string {
	out, err := exec.Command(l.goBin, "env", "GOVERSION").Output()
	if err != nil {
		die("'%s env GOVERSION' failed", l.goBin)
	}
	return strings.TrimSpace(string(out))
}

// computeKey sets l.build from the versions, the go.mod/go.sum files, the
// Go version and the recipe.
func (l *lane) computeKey() {
	l.findGo()
	for _, d := range modules {
		for _, f := range []string{"go.mod", "go.sum"} {
			if _, err := os.Stat(filepath.Join(l.tools, d, f)); err != nil {
				die("missing %s", filepath.Join(l.tools, d, f))
			}
		}
	}
	b := &l.build
	b.goVersion = l.goVersion()
	b.k8s = l.modVersion("kubernetes", "k8s.io/kubernetes")
	b.etcd = l.modVersion("etcd", "go.etcd.io/etcd/server/v3")
	b.kwok = l.modVersion("kwok", "sigs.k8s.io/kwok")
	b.helm = l.modVersion("helm", "helm.sh/helm/v3")
	sum, err := cacheSum(recipe, b.goVersion, func(d, f string) ([]byte, error) {
		return os.ReadFile(filepath.Join(l.tools, d, f))
	})
	if err != nil {
		die("%v", err)
	}
	b.key = cacheKey(b.k8s, b.etcd, b.kwok, b.helm, b.goVersion, sum)
	b.keyDir = filepath.Join(l.cacheRoot, b.key)
	b.bin = filepath.Join(b.keyDir, "bin")
}

// ldflags for one binary: stripped, and the version stamped where the
// program reports it.
func ldflags(name, version string) string {
	f := "-s -w"
	switch {
	case strings.HasPrefix(name, "kube-"):
		v := strings.TrimPrefix(version, "v")
		parts := strings.SplitN(v, ".", 3)
		maj, min := parts[0], ""
		if len(parts) > 1 {
			min = parts[1]
		}
		for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
			f += fmt.Sprintf(" -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean", p, version, p, maj, p, min, p)
		}
	case name == "helm":
		f += " -X helm.sh/helm/v3/internal/version.version=" + version
	}
	return f
}

func (l *lane) buildComplete() bool {
	_, err := os.Stat(filepath.Join(l.build.keyDir, ".complete"))
	return err == nil
}

// goBuild compiles pkg in the module dir into out, niced; go's output goes
// to stderr. It runs in a process group of its own, which a signal to us
// stops as a whole (interruptible).
func (l *lane) goBuild(dir, pkg, version, name, out string) error {
	cmd := exec.Command("nice", "-n", l.nice, l.goBin, "build", "-trimpath",
		"-ldflags", ldflags(name, version), "-o", out, pkg)
	cmd.Dir = filepath.Join(l.tools, dir)
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0",
		"GOFLAGS="+os.Getenv("GOFLAGS")+" -mod=readonly")
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	l.child.Lock()
	if l.child.stopping {
		l.child.Unlock()
		select {} // the signal handler exits the program
	}
	err := cmd.Start()
	if err != nil {
		l.child.Unlock()
		return err
	}
	done := make(chan struct{})
	l.child.pid, l.child.done = cmd.Process.Pid, done
	l.child.Unlock()
	err = cmd.Wait()
	close(done)
	l.child.Lock()
	l.child.pid, l.child.done = 0, nil
	stopping := l.child.stopping
	l.child.Unlock()
	if stopping {
		select {} // stopped by a signal: the handler cleans up and exits
	}
	return err
}

// runningBuild is the go build in progress, for the signal handler.
type runningBuild struct {
	sync.Mutex
	pid      int
	done     chan struct{}
	stopping bool
}

// interruptible makes SIGINT, SIGTERM and SIGHUP stop the go build in
// progress (its whole process group), wait for it, run cleanup and exit, so
// that no half-made output is left behind (CI stops its Go builds with a
// signal to their process group). The returned function ends that.
func (l *lane) interruptible(cleanup func()) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			sig := s.(syscall.Signal)
			l.child.Lock()
			l.child.stopping = true
			pid, done := l.child.pid, l.child.done
			l.child.Unlock()
			if pid != 0 {
				syscall.Kill(-pid, sig)
				select {
				case <-done:
				case <-time.After(15 * time.Second):
					syscall.Kill(-pid, syscall.SIGKILL)
					<-done
				}
			}
			cleanup()
			logf("stopped by %v", sig)
			os.Exit(128 + int(sig))
		case <-quit:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(quit)
	}
}

func (l *lane) goEnv(name string) string {
	out, err := exec.Command(l.goBin, "env", name).Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// cmdBuild builds the binaries once into the cache (a temporary directory
// renamed into place, so an interrupted build leaves nothing half-made).
func (l *lane) cmdBuild() {
	l.computeKey()
	b := &l.build
	if l.buildComplete() {
		logf("cached: %s", b.bin)
		return
	}
	if err := os.MkdirAll(l.cacheRoot, 0o755); err != nil {
		die("%v", err)
	}
	tmp, err := os.MkdirTemp(l.cacheRoot, ".build.")
	if err != nil {
		die("%v", err)
	}
	tmpDir := tmp
	defer l.interruptible(func() { os.RemoveAll(tmpDir) })()
	defer func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()
	for _, d := range []string{"bin", "share/kwok"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			die("%v", err)
		}
	}
	logf("building into %s (Go: %s, GOMODCACHE=%s, GOCACHE=%s)", b.keyDir, l.goEnv("GOVERSION"), l.goEnv("GOMODCACHE"), l.goEnv("GOCACHE"))
	total0 := time.Now()
	times, err := os.Create(filepath.Join(tmp, "build-times"))
	if err != nil {
		die("%v", err)
	}
	defer times.Close()
	tee := io.MultiWriter(times, os.Stderr)
	for _, bin := range binaries {
		ver := l.modVersion(bin.dir, bin.module)
		t0 := time.Now()
		logf("go build %s@%s ...", bin.pkg, ver)
		if err := l.goBuild(bin.dir, bin.pkg, ver, bin.name, filepath.Join(tmp, "bin", bin.name)); err != nil {
			die("building %s (%s@%s in %s) failed; see the go output above", bin.name, bin.pkg, ver, filepath.Join(l.tools, bin.dir))
		}
		fmt.Fprintf(tee, "%-24s %-10s %4ds\n", bin.name, ver, int(time.Since(t0).Seconds()))
	}
	// KWOK's stages and the Exec CRD come from the same module version.
	list := exec.Command(l.goBin, "list", "-mod=readonly", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok")
	list.Dir = filepath.Join(l.tools, "kwok")
	list.Env = append(os.Environ(), "GOWORK=off")
	list.Stderr = os.Stderr
	out, err := list.Output()
	if err != nil {
		die("cannot locate the sigs.k8s.io/kwok module directory")
	}
	kwokDir := strings.TrimSpace(string(out))
	for _, f := range kwokShare {
		data, err := os.ReadFile(filepath.Join(kwokDir, f))
		if err != nil {
			die("%v", err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "share", "kwok", filepath.Base(f)), data, 0o644); err != nil {
			die("%v", err)
		}
	}
	if err := userWritableWorldReadable(tmp); err != nil {
		die("%v", err)
	}
	fmt.Fprintf(tee, "total %ds\n", int(time.Since(total0).Seconds()))
	if err := os.WriteFile(filepath.Join(tmp, "key"), []byte(b.key+"\n"), 0o644); err != nil {
		die("%v", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		die("%v", err)
	}
	if _, err := os.Stat(b.keyDir); err == nil && !l.buildComplete() {
		os.RemoveAll(b.keyDir)
	}
	if err := os.Rename(tmp, b.keyDir); err != nil {
		if !l.buildComplete() {
			die("cannot move %s to %s", tmp, b.keyDir)
		}
		logf("another build finished %s first; using it", b.keyDir)
	} else {
		tmp = ""
	}
	logf("built: %s", b.bin)
}

// userWritableWorldReadable is chmod -R u+w,go+rX.
func userWritableWorldReadable(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := info.Mode().Perm() | 0o200 | 0o044
		if d.IsDir() || m&0o111 != 0 {
			m |= 0o011
		}
		return os.Chmod(p, m)
	})
}

// cmdHelm returns a Helm binary for the kube-sim lane's chart tests: the
// full build's when it is cached, else Helm alone, built once (a few
// minutes, against about 40 for the control plane).
func (l *lane) cmdHelm() string {
	l.computeKey()
	if l.buildComplete() {
		return filepath.Join(l.build.bin, "helm")
	}
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(l.tools, "helm", f))
		if err != nil {
			die("%v", err)
		}
		return b
	}
	dir := filepath.Join(l.cacheRoot, helmOnlyKey(l.build.helm, l.build.goVersion, read("go.mod"), read("go.sum")))
	helm := filepath.Join(dir, "helm")
	if st, err := os.Stat(helm); err == nil && st.Mode()&0o111 != 0 {
		return helm
	}
	logf("building Helm %s alone into %s (the kube-sim lane needs only Helm; 'build' makes the rest)", l.build.helm, dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		die("%v", err)
	}
	defer l.interruptible(func() { os.Remove(helm + ".tmp") })()
	if err := l.goBuild("helm", "helm.sh/helm/v3/cmd/helm", l.build.helm, "helm", helm+".tmp"); err != nil {
		die("building helm (%s in %s) failed; see the go output above", l.build.helm, filepath.Join(l.tools, "helm"))
	}
	if err := os.Rename(helm+".tmp", helm); err != nil {
		die("%v", err)
	}
	return helm
}
