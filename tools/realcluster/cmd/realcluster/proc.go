package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func (l *lane) pidFile(name string) string {
	return filepath.Join(l.state, "pids", name+".pid")
}

func (l *lane) logFile(name string) string {
	return filepath.Join(l.state, "logs", name+".log")
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: kill -0 is all we know
	}
	return procState(string(b)) != "Z"
}

// procState is the state field of /proc/<pid>/stat (the one after the
// parenthesised command name, which may itself hold spaces).
func procState(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(stat[i+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func exeOf(pid int) string {
	s, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return s
}

// pidRecord is a pid file: the pid on line 1, the binary it runs on line 2.
type pidRecord struct {
	pid int
	exe string
}

func parsePidFile(b []byte) (pidRecord, bool) {
	lines := strings.Split(string(b), "\n")
	pid, err := strconv.Atoi(lines[0])
	if err != nil || pid <= 0 || strings.TrimLeft(lines[0], "0123456789") != "" {
		return pidRecord{}, false
	}
	r := pidRecord{pid: pid}
	if len(lines) > 1 {
		r.exe = lines[1]
	}
	return r, true
}

func (l *lane) readPid(name string) (pidRecord, bool) {
	b, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return pidRecord{}, false
	}
	return parsePidFile(b)
}

// running: the component's pid file names a live process that runs the
// binary it was started from (a reused pid is not ours).
func (l *lane) running(name string) bool {
	r, ok := l.readPid(name)
	if !ok || !alive(r.pid) {
		return false
	}
	return r.exe == "" || exeOf(r.pid) == r.exe
}

func (l *lane) anyRunning() bool {
	for _, c := range components {
		if l.running(c) {
			return true
		}
	}
	return false
}

// start runs bin in a session of its own, stdio to <state>/logs/<name>.log,
// and records pid and binary in <state>/pids/<name>.pid. env, when not nil,
// replaces the environment.
func (l *lane) start(name, bin string, env []string, args ...string) {
	if st, err := os.Stat(bin); err != nil || st.Mode()&0o111 == 0 || st.IsDir() {
		die("%s is not executable", bin)
	}
	exe, err := filepath.Abs(bin)
	if err != nil {
		die("%v", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		die("%v", err)
	}
	logf("starting %s (log: %s)", name, l.logFile(name))
	out, err := os.OpenFile(l.logFile(name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		die("%v", err)
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		die("%s did not start: %v (see %s)", name, err, l.logFile(name))
	}
	pid := cmd.Process.Pid
	// Not waited for: it outlives us (reparented when we exit); a zombie
	// in the meantime counts as dead (alive).
	cmd.Process.Release()
	if err := os.WriteFile(l.pidFile(name), []byte(fmt.Sprintf("%d\n%s\n", pid, exe)), 0o644); err != nil {
		die("%v", err)
	}
	if !l.running(name) {
		die("%s exited at once (see %s)", name, l.logFile(name))
	}
}

// stop sends SIGTERM to the named components that run, waits up to 15 s,
// sends SIGKILL to what is left and removes their pid files.
func (l *lane) stop(names ...string) {
	type proc struct {
		name string
		pid  int
	}
	var procs []proc
	for _, n := range names {
		if l.running(n) {
			r, _ := l.readPid(n)
			logf("stopping %s (pid %d)", n, r.pid)
			syscall.Kill(r.pid, syscall.SIGTERM)
			procs = append(procs, proc{n, r.pid})
		}
	}
	for i := 0; i < 150 && len(procs) > 0; i++ {
		left := false
		for _, p := range procs {
			if alive(p.pid) {
				left = true
			}
		}
		if !left {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range procs {
		if !alive(p.pid) {
			continue
		}
		logf("%s (pid %d) ignored SIGTERM for 15s; sending SIGKILL", p.name, p.pid)
		syscall.Kill(p.pid, syscall.SIGKILL)
		time.Sleep(500 * time.Millisecond)
		if alive(p.pid) {
			die("%s (pid %d) survived SIGKILL", p.name, p.pid)
		}
	}
	for _, n := range names {
		os.Remove(l.pidFile(n))
	}
}

// stopAll: controllers and kwok first, then the apiserver, then etcd.
func (l *lane) stopAll() {
	l.stop("kwok", "kube-scheduler", "kube-controller-manager")
	l.stop("kube-apiserver")
	l.stop("etcd")
}
