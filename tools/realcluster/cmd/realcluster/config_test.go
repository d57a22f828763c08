package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestKubeconfigCert(t *testing.T) {
	got := kubeconfigCert(6443, []byte("ca"), "kubernetes-admin", []byte("crt"), []byte("key"))
	want := `apiVersion: v1
kind: Config
clusters:
- name: gpufleet-real
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Y2E=
users:
- name: kubernetes-admin
  user:
    client-certificate-data: Y3J0
    client-key-data: a2V5
contexts:
- name: kubernetes-admin@gpufleet-real
  context:
    cluster: gpufleet-real
    user: kubernetes-admin
current-context: kubernetes-admin@gpufleet-real
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestKubeconfigToken(t *testing.T) {
	got := kubeconfigToken(6443, []byte("ca"), "system:serviceaccount:gpuid:gpuid", "tok", "gpuid")
	want := `apiVersion: v1
kind: Config
clusters:
- name: gpufleet-real
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Y2E=
users:
- name: system:serviceaccount:gpuid:gpuid
  user:
    token: tok
contexts:
- name: system:serviceaccount:gpuid:gpuid@gpufleet-real
  context:
    cluster: gpufleet-real
    user: system:serviceaccount:gpuid:gpuid
    namespace: gpuid
current-context: system:serviceaccount:gpuid:gpuid@gpufleet-real
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestTokenAuthCSV(t *testing.T) {
	got := tokenAuthCSV("mokka-agent-node", "n", "a", "b")
	want := "n,system:node:mokka-agent-node,node-mokka-agent-node,\"system:nodes\"\n" +
		"a,alice,alice-uid,\"system:masters\"\n" +
		"b,bob,bob-uid\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if tok := randomToken(); len(tok) != 48 || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Errorf("randomToken() = %q, want 48 hex digits", tok)
	}
}

var quoteCases = []string{
	"/work/repo/.real-cluster/admin.kubeconfig",
	"https://127.0.0.1:6443",
	"0", "mokka-agent-node", "a,b=c+d@e%f",
	"", "with space", "it's", `a"b`, `back\slash`, "$HOME", "a*b?[c]", "~user", "x~y",
	"semi;colon", "pipe|amp&", "(paren){brace}", "<>", "#hash", "a#b", "a=~b", "a:~b", "^caret!", "é", "new\nline", "tab\there",
}

// shellQuote must read back, through bash, as the string it quoted, and
// print what bash's printf %q prints for the plain cases.
func TestShellQuoteAgainstBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, s := range quoteCases {
		out, err := exec.Command("bash", "-c", `eval "v=$1"; printf '%s' "$v"`, "bash", shellQuote(s)).Output()
		if err != nil {
			t.Fatalf("bash eval of %q: %v", shellQuote(s), err)
		}
		if string(out) != s {
			t.Errorf("bash reads %q back as %q, want %q", shellQuote(s), out, s)
		}
		if strings.ContainsAny(s, "\n\t") {
			continue
		}
		q, err := exec.Command("bash", "-c", `printf '%q' "$1"`, "bash", s).Output()
		if err != nil {
			t.Fatal(err)
		}
		if shellQuote(s) != string(q) {
			t.Errorf("shellQuote(%q) = %s, bash printf %%q = %s", s, shellQuote(s), q)
		}
	}
}

func TestShellUnquote(t *testing.T) {
	for _, s := range quoteCases {
		if got := shellUnquote(shellQuote(s)); got != s {
			t.Errorf("shellUnquote(%s) = %q, want %q", shellQuote(s), got, s)
		}
	}
	if got := shellUnquote(`'single quoted'`); got != "single quoted" {
		t.Errorf("got %q", got)
	}
}

func TestEnvVars(t *testing.T) {
	vars := envVars(envInputs{
		state: "/s", bin: "/c/key/bin", kubectl: "/r/.venv/bin/kubectl", apiserverPort: 30000, kwok: true,
		serviceAccounts: []serviceAccount{{"gpuid", "gpuid"}, {"mokka-system", "mokka-controller"}},
	})
	got := renderEnv(vars)
	want := `export KUBECONFIG=/s/admin.kubeconfig
export GPUFLEET_REAL_DIR=/s
export GPUFLEET_REAL_ADMIN_KUBECONFIG=/s/admin.kubeconfig
export GPUFLEET_REAL_GPUID_KUBECONFIG=/s/gpuid.kubeconfig
export GPUFLEET_REAL_MOKKA_CONTROLLER_KUBECONFIG=/s/mokka-controller.kubeconfig
export GPUFLEET_REAL_APISERVER=https://127.0.0.1:30000
export GPUFLEET_REAL_CA=/s/pki/ca.crt
export GPUFLEET_REAL_EXEC_DIR=/s/exec
export GPUFLEET_REAL_KWOK=1
export GPUFLEET_REAL_NODE_TOKEN_NAME=mokka-agent-node
export GPUFLEET_REAL_NODE_TOKEN_FILE=/s/token-auth.csv
export GPUFLEET_REAL_BIN=/c/key/bin
export KUBECTL=/r/.venv/bin/kubectl
export HELM=/c/key/bin/helm
export KWOK=/c/key/bin/kwok
export ETCD=/c/key/bin/etcd
export KUBE_APISERVER=/c/key/bin/kube-apiserver
export KUBE_CONTROLLER_MANAGER=/c/key/bin/kube-controller-manager
export KUBE_SCHEDULER=/c/key/bin/kube-scheduler
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	parsed := parseEnv(got)
	for _, v := range vars {
		if parsed[v.name] != v.value {
			t.Errorf("parseEnv: %s = %q, want %q", v.name, parsed[v.name], v.value)
		}
	}
	off := renderEnv(envVars(envInputs{state: "/s", bin: "/b", kubectl: "kubectl", apiserverPort: 1}))
	if !strings.Contains(off, "export GPUFLEET_REAL_KWOK=0\n") {
		t.Errorf("without KWOK:\n%s", off)
	}
}

func TestKubeconfigVar(t *testing.T) {
	for in, want := range map[string]string{
		"gpuid":            "GPUFLEET_REAL_GPUID_KUBECONFIG",
		"mokka-controller": "GPUFLEET_REAL_MOKKA_CONTROLLER_KUBECONFIG",
		"tfjob":            "GPUFLEET_REAL_TFJOB_KUBECONFIG",
	} {
		if got := kubeconfigVar(in); got != want {
			t.Errorf("kubeconfigVar(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestManifestNamespaces(t *testing.T) {
	manifest := `apiVersion: v1
kind: ServiceAccount
metadata:
  name: gpuid
  namespace: gpuid
---
kind: RoleBinding
metadata:
  namespace: "gpu-operator"
subjects:
- kind: ServiceAccount
  name: gpuid
  namespace: 'gpuid'
# namespace: commented
data:
  key: "namespace: not a key"
`
	got := manifestNamespaces(manifest)
	if want := []string{"gpu-operator", "gpuid"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestPortsRoundTrip(t *testing.T) {
	p := ports{20001, 20002, 20003, 20004, 20005, 20006}
	s := p.String()
	want := "ETCD_CLIENT_PORT=20001\nETCD_PEER_PORT=20002\nAPISERVER_PORT=20003\nKCM_PORT=20004\nSCHEDULER_PORT=20005\nKWOK_PORT=20006\n"
	if s != want {
		t.Errorf("ports file\n%s\nwant\n%s", s, want)
	}
	back, ok := parsePorts(s)
	if !ok || back != p {
		t.Errorf("parsePorts = %+v, %v", back, ok)
	}
	if _, ok := parsePorts("APISERVER_PORT=1\n"); ok {
		t.Error("a partial ports file parsed as complete")
	}
}

func TestListeningPorts(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
`
	tcp6 := `  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000
`
	if got := listeningPorts(tcp); !slices.Equal(got, []int{8080}) {
		t.Errorf("tcp: %v", got)
	}
	if got := listeningPorts(tcp6); !slices.Equal(got, []int{22}) {
		t.Errorf("tcp6: %v", got)
	}
}

func TestFreePorts(t *testing.T) {
	seq := []int{0, 0, 5, 1, 5, 2, 3}
	i := 0
	next := func(int) int { v := seq[i%len(seq)]; i++; return v }
	got, err := freePorts(3, map[int]bool{20001: true}, next)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{20000, 20005, 20002}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v (in use and repeated ports skipped)", got, want)
	}
	if _, err := freePorts(2, nil, func(int) int { return 7 }); err == nil {
		t.Error("no error when no distinct port can be found")
	}
	k := 0
	for _, p := range must(freePorts(6, nil, func(n int) int { k++; return n - k })) {
		if p < 20000 || p > 59999 {
			t.Errorf("port %d outside 20000-59999", p)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestComponentArgs(t *testing.T) {
	p := ports{1001, 1002, 1003, 1004, 1005, 1006}
	api := apiserverArgs("/s", p)
	for _, want := range []string{
		"--secure-port=1003",
		"--etcd-servers=http://127.0.0.1:1001",
		"--token-auth-file=/s/token-auth.csv",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-issuer=https://127.0.0.1:1003",
		"--service-account-signing-key-file=/s/pki/sa.key",
		"--kubelet-certificate-authority=/s/pki/ca.crt",
		"--requestheader-client-ca-file=/s/pki/front-proxy-ca.crt",
		"--endpoint-reconciler-type=none",
		"--enable-aggregator-routing=true",
	} {
		if !slices.Contains(api, want) {
			t.Errorf("kube-apiserver lacks %s", want)
		}
	}
	if len(api) != 28 {
		t.Errorf("kube-apiserver has %d flags, want 28 (the flag list of the shell version)", len(api))
	}
	etcd := etcdArgs("/s", p)
	for _, want := range []string{"--data-dir=/s/etcd", "--listen-client-urls=http://127.0.0.1:1001", "--initial-cluster=gpufleet-real=http://127.0.0.1:1002", "--unsafe-no-fsync"} {
		if !slices.Contains(etcd, want) {
			t.Errorf("etcd lacks %s", want)
		}
	}
	kcm := controllerManagerArgs("/s", p)
	for _, want := range []string{"--kubeconfig=/s/kube-controller-manager.kubeconfig", "--secure-port=1004", "--cluster-signing-key-file=/s/pki/ca.key", "--use-service-account-credentials=true"} {
		if !slices.Contains(kcm, want) {
			t.Errorf("kube-controller-manager lacks %s", want)
		}
	}
	sched := schedulerArgs("/s", p)
	for _, want := range []string{"--kubeconfig=/s/kube-scheduler.kubeconfig", "--secure-port=1005", "--leader-elect=false"} {
		if !slices.Contains(sched, want) {
			t.Errorf("kube-scheduler lacks %s", want)
		}
	}
}
