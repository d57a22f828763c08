package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestModVersion(t *testing.T) {
	gomod := []byte(`// comment
module gpufleet.dev/tools/realcluster/kubernetes

go 1.26

require k8s.io/api v0.37.2

require (
	k8s.io/kubernetes v1.37.2
	sigs.k8s.io/kwok v0.8.0 // indirect
)

replace k8s.io/apiserver v0.0.0 => k8s.io/apiserver v0.37.2
`)
	for module, want := range map[string]string{
		"k8s.io/api":        "v0.37.2",
		"k8s.io/kubernetes": "v1.37.2",
		"sigs.k8s.io/kwok":  "v0.8.0",
		"k8s.io/apiserver":  "", // only in a replace line
		"helm.sh/helm/v3":   "",
	} {
		if got := modVersion(gomod, module); got != want {
			t.Errorf("modVersion(%s) = %q, want %q", module, got, want)
		}
	}
}

// The hash of the cache key is what the shell version computed: this
// value is `{ printf 'recipe 2\ngo go1.26.8\n'; for d in etcd kubernetes
// kwok helm; do for f in go.mod go.sum; do printf '== %s/%s\n' $d $f;
// printf '%s %s\n' $d $f; done; done; } | sha256sum | cut -c1-12`.
func TestCacheSumMatchesTheShellRecipe(t *testing.T) {
	got, err := cacheSum("2", "go1.26.8", func(d, f string) ([]byte, error) {
		return []byte(d + " " + f + "\n"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "93744b69083e"; got != want {
		t.Errorf("cacheSum = %s, want %s", got, want)
	}
}

// The same comparison on the repository's own go.mod and go.sum files,
// with the shell pipeline run for real: the cached builds stay valid.
func TestCacheSumOfTheRepositoryMatchesSha256sum(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("no sha256sum")
	}
	tools, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	script := `set -euo pipefail
{ printf 'recipe %s\ngo %s\n' 2 go1.26.8
  for d in etcd kubernetes kwok helm; do
    for f in go.mod go.sum; do printf '== %s/%s\n' "$d" "$f"; cat "$TOOLS/$d/$f"; done
  done
} | sha256sum | cut -c1-12`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "TOOLS="+tools)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	got, err := cacheSum("2", "go1.26.8", func(d, f string) ([]byte, error) {
		return os.ReadFile(filepath.Join(tools, d, f))
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(out)); got != want {
		t.Errorf("cacheSum = %s, the shell recipe gives %s", got, want)
	}
}

func TestCacheKey(t *testing.T) {
	got := cacheKey("v1.37.2", "v3.7.3", "v0.8.0", "v3.22.0", "go1.26.8", "65c3a417345f")
	if want := "k8s-v1.37.2_etcd-v3.7.3_kwok-v0.8.0_helm-v3.22.0_go1.26.8_65c3a417345f"; got != want {
		t.Errorf("cacheKey = %s, want %s", got, want)
	}
}

// `cat go.mod go.sum | sha256sum | cut -c1-12` with go.mod "a\n", go.sum "b\n".
func TestHelmOnlyKey(t *testing.T) {
	got := helmOnlyKey("v3.22.0", "go1.26.8", []byte("a\n"), []byte("b\n"))
	if want := "helm-v3.22.0_go1.26.8_911169ddaaf1"; got != want {
		t.Errorf("helmOnlyKey = %s, want %s", got, want)
	}
}

func TestLdflags(t *testing.T) {
	cases := map[[2]string]string{
		{"etcd", "v3.7.3"}:  "-s -w",
		{"kwok", "v0.8.0"}:  "-s -w",
		{"helm", "v3.22.0"}: "-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0",
		{"kube-scheduler", "v1.37.2"}: "-s -w" +
			" -X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean" +
			" -X k8s.io/client-go/pkg/version.gitVersion=v1.37.2 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37 -X k8s.io/client-go/pkg/version.gitTreeState=clean",
	}
	for in, want := range cases {
		if got := ldflags(in[0], in[1]); got != want {
			t.Errorf("ldflags(%s, %s) =\n  %s\nwant\n  %s", in[0], in[1], got, want)
		}
	}
}

func TestBinariesCoverTheModules(t *testing.T) {
	names := map[string]bool{}
	for _, b := range binaries {
		names[b.name] = true
		if _, err := os.Stat(filepath.Join("..", "..", b.dir, "go.mod")); err != nil {
			t.Errorf("%s: module dir %s: %v", b.name, b.dir, err)
		}
	}
	for _, want := range append([]string{"helm"}, components...) {
		if !names[want] {
			t.Errorf("no binary %s", want)
		}
	}
}

func TestUserWritableWorldReadable(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	x := filepath.Join(dir, "x")
	os.WriteFile(f, nil, 0o400)
	os.WriteFile(x, nil, 0o500)
	if err := userWritableWorldReadable(dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{f: 0o644, x: 0o755} {
		st, _ := os.Stat(p)
		if st.Mode().Perm() != want {
			t.Errorf("%s: %v, want %v", p, st.Mode().Perm(), want)
		}
	}
}
