package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func (l *lane) cmdEnv() {
	b, err := os.ReadFile(filepath.Join(l.state, "env"))
	if err != nil {
		die("not up (no %s); run '%s up' first", filepath.Join(l.state, "env"), l.self)
	}
	if !l.anyRunning() {
		die("nothing runs in %s (stale state); run '%s down' and '%s up'", l.state, l.self, l.self)
	}
	os.Stdout.Write(b)
}

// cmdStatus says what runs: each component, the apiserver's /readyz, the
// ports.
func (l *lane) cmdStatus() {
	if _, err := os.Stat(filepath.Join(l.state, marker)); err != nil {
		fmt.Printf("not up (no state dir %s)\n", l.state)
		return
	}
	var p ports
	havePorts := false
	if b, err := os.ReadFile(filepath.Join(l.state, "ports")); err == nil {
		p, havePorts = parsePorts(string(b))
	}
	fmt.Printf("state: %s\n", l.state)
	if b, err := os.ReadFile(filepath.Join(l.state, "build-key")); err == nil {
		fmt.Printf("build: %s\n", filepath.Join(l.cacheRoot, strings.TrimRight(string(b), "\n")))
	}
	n := 0
	for _, c := range components {
		pid := ""
		if b, err := os.ReadFile(l.pidFile(c)); err == nil {
			pid, _, _ = strings.Cut(string(b), "\n")
		}
		switch {
		case l.running(c):
			fmt.Printf("  %s: running (pid %s, log %s)\n", c, pid, l.logFile(c))
			n++
		case pid != "":
			fmt.Printf("  %s: NOT running (pid %s gone; log %s)\n", c, pid, l.logFile(c))
		default:
			fmt.Printf("  %s: not started\n", c)
		}
	}
	if l.running("kube-apiserver") {
		if l.kubectl == "" {
			l.kubectl = filepath.Join(l.repo, ".venv", "bin", "kubectl")
		}
		out, _ := l.k("get", "--raw=/readyz").CombinedOutput()
		port := "?"
		if havePorts {
			port = fmt.Sprint(p.apiserver)
		}
		fmt.Printf("  apiserver https://127.0.0.1:%s /readyz: %s\n", port, strings.TrimRight(string(out), "\n"))
	}
	if havePorts {
		fmt.Printf("  ports: etcd %d/%d apiserver %d controller-manager %d scheduler %d kwok %d\n",
			p.etcdClient, p.etcdPeer, p.apiserver, p.kcm, p.scheduler, p.kwok)
	}
	fmt.Printf("%d of %d components running\n", n, len(components))
}

func (l *lane) cmdDown() {
	if st, err := os.Stat(l.state); err != nil || !st.IsDir() {
		logf("nothing to stop (no %s)", l.state)
		return
	}
	if _, err := os.Stat(filepath.Join(l.state, marker)); err != nil {
		die("%s was not made by this script; not touching it", l.state)
	}
	l.stopAll()
	if err := os.RemoveAll(l.state); err != nil {
		die("%v", err)
	}
	logf("down; removed %s", l.state)
}

// smokeManifest: a fake Node, the kwok Exec that picks its capture, and a
// device-plugin Pod on it in gpu-operator.
func smokeManifest(node, pod string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: %[1]s
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: %[1]s
    type: kwok
spec:
  taints:
  - key: kwok.x-k8s.io/node
    value: fake
    effect: NoSchedule
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Exec
metadata:
  name: %[2]s
  namespace: gpu-operator
spec:
  execs:
  - local:
      envs:
      - name: GPUFLEET_EXEC_NODE
        value: %[1]s
      - name: GPUFLEET_EXEC_POD
        value: %[2]s
---
apiVersion: v1
kind: Pod
metadata:
  name: %[2]s
  namespace: gpu-operator
  labels:
    app: nvidia-device-plugin-daemonset
spec:
  nodeName: %[1]s
  tolerations:
  - key: kwok.x-k8s.io/node
    operator: Exists
    effect: NoSchedule
  containers:
  - name: nvidia-device-plugin-ctr
    image: nvcr.io/nvidia/k8s-device-plugin:v0.17.0
`, node, pod)
}

// cmdSmoke is the end-to-end check of the lane on a running cluster: a fake
// Node, its kwok Exec and a device-plugin Pod in gpu-operator; `kubectl
// exec ... nvidia-smi -q -x` must print the capture chosen for the Node,
// with the admin and with the gpuid kubeconfig. Removes what it created.
func (l *lane) cmdSmoke() {
	b, err := os.ReadFile(filepath.Join(l.state, "env"))
	if err != nil {
		die("not up; run '%s up' first", l.self)
	}
	env := parseEnv(string(b))
	if env["GPUFLEET_REAL_KWOK"] != "1" {
		die("KWOK is not running (GPUFLEET_REAL_NO_KWOK=1?)")
	}
	l.kubectl = env["KUBECTL"]
	execDir := env["GPUFLEET_REAL_EXEC_DIR"]
	const node, pod = "gpufleet-smoke-node", "gpufleet-smoke-device-plugin"
	fixture := filepath.Join(l.repo, "crates", "gpuid", "tests", "fixtures", "hardware", "h100.xml")
	want, err := os.ReadFile(fixture)
	if err != nil {
		die("missing fixture %s", fixture)
	}
	capture := filepath.Join(execDir, node+".xml")
	writeFile(capture, string(want), 0o644)
	apply := l.k("apply", "-f", "-")
	apply.Stdin = strings.NewReader(smokeManifest(node, pod))
	apply.Stderr = os.Stderr
	if err := apply.Run(); err != nil {
		die("smoke: kubectl apply failed")
	}
	wait := l.k("-n", "gpu-operator", "wait", "--for=condition=Ready", "pod/"+pod, "--timeout=60s")
	wait.Stderr = os.Stderr
	if wait.Run() != nil {
		die("smoke: pod gpu-operator/%s did not become Ready (see %s)", pod, l.logFile("kwok"))
	}
	wantText := strings.TrimRight(string(want), "\n")
	for _, kc := range []string{filepath.Join(l.state, "admin.kubeconfig"), filepath.Join(l.state, "gpuid.kubeconfig")} {
		if _, err := os.Stat(kc); err != nil {
			continue
		}
		cmd := l.k("-n", "gpu-operator", "exec", pod, "--", "nvidia-smi", "-q", "-x")
		cmd.Args[2] = kc // --kubeconfig <kc>
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			die("smoke: exec with %s failed (see %s)", filepath.Base(kc), l.logFile("kwok"))
		}
		got := strings.TrimRight(string(out), "\n")
		if got != wantText {
			die("smoke: exec with %s printed something else than %s", filepath.Base(kc), fixture)
		}
		logf("smoke: exec nvidia-smi -q -x via %s: %d bytes, identical to %s", filepath.Base(kc), len(got), filepath.Base(fixture))
	}
	for _, args := range [][]string{
		{"-n", "gpu-operator", "delete", "pod", pod, "--wait=true", "--timeout=60s"},
		{"-n", "gpu-operator", "delete", "exec.kwok.x-k8s.io", pod},
		{"delete", "node", node},
	} {
		cmd := l.k(args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			die("smoke: kubectl %s failed", strings.Join(args, " "))
		}
	}
	os.Remove(capture)
	logf("smoke: ok")
}
