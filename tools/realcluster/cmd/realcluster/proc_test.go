package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestProcState(t *testing.T) {
	for stat, want := range map[string]string{
		"123 (etcd) S 1 123 123 0 -1":     "S",
		"124 (a (weird) name) Z 1 2 3":    "Z",
		"125 (kube-apiserver) R 1 125 12": "R",
		"garbage":                         "",
	} {
		if got := procState(stat); got != want {
			t.Errorf("procState(%q) = %q, want %q", stat, got, want)
		}
	}
}

func TestParsePidFile(t *testing.T) {
	r, ok := parsePidFile([]byte("42\n/cache/bin/etcd\n"))
	if !ok || r.pid != 42 || r.exe != "/cache/bin/etcd" {
		t.Errorf("got %+v %v", r, ok)
	}
	if r, ok := parsePidFile([]byte("42\n")); !ok || r.exe != "" {
		t.Errorf("a pid file without binary: %+v %v", r, ok)
	}
	for _, bad := range []string{"", "x\n", "-1\n", "4 2\n"} {
		if _, ok := parsePidFile([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// start, running and stop with a real process: sleep, started in its own
// session, recorded with its binary, stopped by SIGTERM.
func TestStartRunningStop(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	l := &lane{state: t.TempDir()}
	for _, d := range []string{"pids", "logs"} {
		os.MkdirAll(filepath.Join(l.state, d), 0o755)
	}
	if l.running("etcd") || l.anyRunning() {
		t.Fatal("running before start")
	}
	l.start("etcd", sleep, []string{"PATH=/nonexistent"}, "60")
	if !l.running("etcd") || !l.anyRunning() {
		t.Fatal("not running after start")
	}
	r, _ := l.readPid("etcd")
	if exe, _ := filepath.EvalSymlinks(sleep); r.exe != exe {
		t.Errorf("pid file names %s, want %s", r.exe, exe)
	}
	env, _ := os.ReadFile("/proc/" + itoa(r.pid) + "/environ")
	if string(env) != "PATH=/nonexistent\x00" {
		t.Errorf("environment %q, want only PATH", env)
	}
	// A pid file that names another binary is not ours.
	os.WriteFile(l.pidFile("kwok"), []byte(itoa(r.pid)+"\n/bin/not-sleep\n"), 0o644)
	if l.running("kwok") {
		t.Error("a reused pid counts as running")
	}
	l.stop("kwok", "etcd")
	if alive(r.pid) || l.running("etcd") {
		t.Error("still running after stop")
	}
	if _, err := os.Stat(l.pidFile("etcd")); !os.IsNotExist(err) {
		t.Error("pid file left")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestStartRefusesAMissingBinary(t *testing.T) {
	l := &lane{state: t.TempDir()}
	defer func() {
		f, ok := recover().(failure)
		if !ok || !strings.Contains(f.msg, "is not executable") {
			t.Errorf("recovered %v", f)
		}
	}()
	l.start("etcd", filepath.Join(l.state, "missing"), nil)
}

func TestLastLines(t *testing.T) {
	if got := lastLines("a\nb\nc\n", 2); strings.Join(got, ",") != "b,c" {
		t.Errorf("got %v", got)
	}
	if got := lastLines("", 2); len(got) != 0 {
		t.Errorf("got %v", got)
	}
}
