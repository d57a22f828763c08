package main

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// kubeconfigCert is a kubeconfig for user with an embedded client
// certificate (all three PEMs base64-encoded, so it works from anywhere).
func kubeconfigCert(apiserverPort int, caPEM []byte, user string, certPEM, keyPEM []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: gpufleet-real
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: %s@gpufleet-real
  context:
    cluster: gpufleet-real
    user: %s
current-context: %s@gpufleet-real
`, apiserverPort, b64(caPEM), user, b64(certPEM), b64(keyPEM), user, user, user)
}

// kubeconfigToken is a kubeconfig whose only credential is a bearer token,
// with a default namespace.
func kubeconfigToken(apiserverPort int, caPEM []byte, user, token, namespace string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: gpufleet-real
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: %s@gpufleet-real
  context:
    cluster: gpufleet-real
    user: %s
    namespace: %s
current-context: %s@gpufleet-real
`, apiserverPort, base64.StdEncoding.EncodeToString(caPEM), user, token, user, user, namespace, user)
}

// ports are the six loopback ports of a lane, <state>/ports.
type ports struct {
	etcdClient, etcdPeer, apiserver, kcm, scheduler, kwok int
}

// portNames: the ports file's variable names, in its order.
var portNames = []string{"ETCD_CLIENT_PORT", "ETCD_PEER_PORT", "APISERVER_PORT", "KCM_PORT", "SCHEDULER_PORT", "KWOK_PORT"}

func (p *ports) fields() []*int {
	return []*int{&p.etcdClient, &p.etcdPeer, &p.apiserver, &p.kcm, &p.scheduler, &p.kwok}
}

// String is the ports file: NAME=port lines a shell can source.
func (p ports) String() string {
	var b strings.Builder
	for i, f := range p.fields() {
		fmt.Fprintf(&b, "%s=%d\n", portNames[i], *f)
	}
	return b.String()
}

// parsePorts reads a ports file; ok says whether every port was there.
func parsePorts(s string) (p ports, ok bool) {
	found := 0
	for _, line := range strings.Split(s, "\n") {
		name, val, cut := strings.Cut(strings.TrimSpace(line), "=")
		if !cut {
			continue
		}
		for i, f := range p.fields() {
			if portNames[i] == name {
				if n, err := strconv.Atoi(val); err == nil {
					*f = n
					found++
				}
			}
		}
	}
	return p, found == len(portNames)
}

// shellQuote quotes s the way bash's printf %q does for the strings a lane
// deals in (paths, URLs, names): unchanged when nothing needs quoting, else
// each special character backslash-escaped, and $'...' when s holds a
// control character.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return ansiCQuote(s)
		}
	}
	var b strings.Builder
	prev := rune(0)
	for i, r := range s {
		special := strings.ContainsRune(" !\"$&'()*,;<>?[\\]^`{|}", r) ||
			(r == '#' && i == 0) ||
			(r == '~' && (i == 0 || prev == '=' || prev == ':'))
		if special {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
		prev = r
	}
	return b.String()
}

func ansiCQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for _, c := range []byte(s) {
		switch {
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\%03o`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// shellUnquote reverses shellQuote (and plain single quotes), for reading
// the env file back.
func shellUnquote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case c == '$' && i+1 < len(s) && s[i+1] == '\'':
			i += 2
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
					switch e := s[i]; {
					case e == 'n':
						b.WriteByte('\n')
					case e == 't':
						b.WriteByte('\t')
					case e >= '0' && e <= '7' && i+2 < len(s):
						n, _ := strconv.ParseUint(s[i:i+3], 8, 8)
						b.WriteByte(byte(n))
						i += 2
					default:
						b.WriteByte(e)
					}
					continue
				}
				b.WriteByte(s[i])
			}
		case c == '\'':
			for i++; i < len(s) && s[i] != '\''; i++ {
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// envVar is one `export NAME=value` line of <state>/env.
type envVar struct{ name, value string }

func renderEnv(vars []envVar) string {
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "export %s=%s\n", v.name, shellQuote(v.value))
	}
	return b.String()
}

func parseEnv(s string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "export ")
		if !ok {
			continue
		}
		if name, val, ok := strings.Cut(line, "="); ok {
			m[name] = shellUnquote(val)
		}
	}
	return m
}

// serviceAccount is one ServiceAccount of a deploy/*/*rbac*.yaml file.
type serviceAccount struct{ namespace, name string }

// kubeconfigVar is the env variable naming a ServiceAccount's kubeconfig:
// gpuid → GPUFLEET_REAL_GPUID_KUBECONFIG, mokka-controller →
// GPUFLEET_REAL_MOKKA_CONTROLLER_KUBECONFIG.
func kubeconfigVar(sa string) string {
	var b strings.Builder
	for _, r := range sa {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case r == '-':
			b.WriteByte('_')
		default:
			b.WriteRune(r)
		}
	}
	return "GPUFLEET_REAL_" + b.String() + "_KUBECONFIG"
}

// envInputs is what the env file is made of.
type envInputs struct {
	state, bin, kubectl string
	apiserverPort       int
	kwok                bool
	serviceAccounts     []serviceAccount
}

// envVars: what `env` prints, in order.
func envVars(in envInputs) []envVar {
	admin := filepath.Join(in.state, "admin.kubeconfig")
	vars := []envVar{
		{"KUBECONFIG", admin},
		{"GPUFLEET_REAL_DIR", in.state},
		{"GPUFLEET_REAL_ADMIN_KUBECONFIG", admin},
	}
	for _, sa := range in.serviceAccounts {
		vars = append(vars, envVar{kubeconfigVar(sa.name), filepath.Join(in.state, sa.name+".kubeconfig")})
	}
	kwok := "0"
	if in.kwok {
		kwok = "1"
	}
	bin := func(n string) string { return filepath.Join(in.bin, n) }
	return append(vars,
		envVar{"GPUFLEET_REAL_APISERVER", fmt.Sprintf("https://127.0.0.1:%d", in.apiserverPort)},
		envVar{"GPUFLEET_REAL_CA", filepath.Join(in.state, "pki", "ca.crt")},
		envVar{"GPUFLEET_REAL_EXEC_DIR", filepath.Join(in.state, "exec")},
		envVar{"GPUFLEET_REAL_KWOK", kwok},
		envVar{"GPUFLEET_REAL_NODE_TOKEN_NAME", nodeTokenName},
		envVar{"GPUFLEET_REAL_NODE_TOKEN_FILE", filepath.Join(in.state, "token-auth.csv")},
		envVar{"GPUFLEET_REAL_BIN", in.bin},
		envVar{"KUBECTL", in.kubectl},
		envVar{"HELM", bin("helm")},
		envVar{"KWOK", bin("kwok")},
		envVar{"ETCD", bin("etcd")},
		envVar{"KUBE_APISERVER", bin("kube-apiserver")},
		envVar{"KUBE_CONTROLLER_MANAGER", bin("kube-controller-manager")},
		envVar{"KUBE_SCHEDULER", bin("kube-scheduler")},
	)
}

// manifestNamespaces: the namespaces a manifest puts objects in (every
// `namespace: x` line, quotes dropped), sorted and unique, so they can be
// created before the manifest is applied.
func manifestNamespaces(manifest string) []string {
	seen := map[string]bool{}
	for _, line := range strings.Split(manifest, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "namespace:" {
			ns := strings.NewReplacer(`"`, "", "'", "").Replace(f[1])
			if ns != "" {
				seen[ns] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// apiserverArgs: kube-apiserver's flags. --enable-aggregator-routing:
// admission webhooks named by a Service are dialled at an address of its
// EndpointSlices (there is no kube-proxy here), the way kube-sim resolves
// them; tests point the slice at 127.0.0.1.
func apiserverArgs(state string, p ports) []string {
	pki := func(f string) string { return filepath.Join(state, "pki", f) }
	return []string{
		"--advertise-address=127.0.0.1", "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.apiserver),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", p.etcdClient),
		"--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
		"--client-ca-file=" + pki("ca.crt"),
		"--token-auth-file=" + filepath.Join(state, "token-auth.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=" + serviceCIDR,
		fmt.Sprintf("--service-account-issuer=https://127.0.0.1:%d", p.apiserver),
		"--service-account-key-file=" + pki("sa.pub"),
		"--service-account-signing-key-file=" + pki("sa.key"),
		"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + pki("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		"--requestheader-client-ca-file=" + pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki("front-proxy-client.crt"),
		"--proxy-client-key-file=" + pki("front-proxy-client.key"),
		"--endpoint-reconciler-type=none",
		"--enable-aggregator-routing=true",
		"--allow-privileged=true", "--profiling=false",
	}
}

func etcdArgs(state string, p ports) []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", p.etcdClient)
	peer := fmt.Sprintf("http://127.0.0.1:%d", p.etcdPeer)
	return []string{
		"--name=gpufleet-real", "--data-dir=" + filepath.Join(state, "etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=gpufleet-real=" + peer,
		"--initial-cluster-state=new", "--unsafe-no-fsync",
	}
}

func controllerManagerArgs(state string, p ports) []string {
	kc := filepath.Join(state, "kube-controller-manager.kubeconfig")
	pki := func(f string) string { return filepath.Join(state, "pki", f) }
	return []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.kcm),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + pki("sa.key"),
		"--root-ca-file=" + pki("ca.crt"),
		"--cluster-signing-cert-file=" + pki("ca.crt"), "--cluster-signing-key-file=" + pki("ca.key"),
		"--enable-garbage-collector=true", "--leader-elect=false", "--profiling=false",
	}
}

func schedulerArgs(state string, p ports) []string {
	kc := filepath.Join(state, "kube-scheduler.kubeconfig")
	return []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.scheduler),
		"--leader-elect=false", "--profiling=false",
	}
}

// listeningPorts: local TCP ports in LISTEN state (0A) in a /proc/net/tcp
// or tcp6 table.
func listeningPorts(table string) []int {
	var out []int
	for i, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 4 || f[3] != "0A" {
			continue
		}
		j := strings.LastIndexByte(f[1], ':')
		if j < 0 {
			continue
		}
		if n, err := strconv.ParseUint(f[1][j+1:], 16, 16); err == nil {
			out = append(out, int(n))
		}
	}
	return out
}

// freePorts picks n distinct ports in 20000-59999 that are not in used.
func freePorts(n int, used map[int]bool, random func(int) int) ([]int, error) {
	taken := map[int]bool{}
	for p := range used {
		taken[p] = true
	}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries >= 1000 {
			return nil, fmt.Errorf("could not find %d free ports", n)
		}
		p := 20000 + random(40000)
		if taken[p] {
			continue
		}
		taken[p] = true
		out = append(out, p)
	}
	return out, nil
}

func systemListeningPorts() map[int]bool {
	used := map[int]bool{}
	for _, t := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, p := range listeningPorts(string(b)) {
			used[p] = true
		}
	}
	return used
}
