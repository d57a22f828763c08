package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity of every certificate up makes; a lane lives for one run.
const certValidity = 30 * 24 * time.Hour

// certSpec is one certificate signed by a CA of the lane.
type certSpec struct {
	name string // <name>.crt and <name>.key in pki/
	ca   string // the signing CA's name
	org  string // O=, empty for none
	cn   string
	eku  x509.ExtKeyUsage
	dns  []string
	ips  []string
}

// apiserverSANs: every name a client may dial the apiserver by.
var apiserverSANs = certSpec{
	dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	ips: []string{"127.0.0.1", serviceIP},
}

// leafCerts are the certificates up signs, in order.
var leafCerts = []certSpec{
	// Aggregation layer / request-header authentication (what kubeadm calls
	// front-proxy); the controllers' delegated authn reads its CA.
	{name: "front-proxy-client", ca: "front-proxy-ca", cn: "front-proxy-client", eku: x509.ExtKeyUsageClientAuth},
	{name: "apiserver", ca: "ca", cn: "kube-apiserver", eku: x509.ExtKeyUsageServerAuth, dns: apiserverSANs.dns, ips: apiserverSANs.ips},
	{name: "apiserver-kubelet-client", ca: "ca", org: "system:masters", cn: "kube-apiserver-kubelet-client", eku: x509.ExtKeyUsageClientAuth},
	{name: "admin", ca: "ca", org: "system:masters", cn: "kubernetes-admin", eku: x509.ExtKeyUsageClientAuth},
	{name: "kube-controller-manager", ca: "ca", cn: "system:kube-controller-manager", eku: x509.ExtKeyUsageClientAuth},
	{name: "kube-scheduler", ca: "ca", cn: "system:kube-scheduler", eku: x509.ExtKeyUsageClientAuth},
	{name: "kwok", ca: "ca", org: "system:masters", cn: "kwok-controller", eku: x509.ExtKeyUsageClientAuth},
	{name: "kwok-serving", ca: "ca", cn: "kwok-kubelet", eku: x509.ExtKeyUsageServerAuth, dns: []string{"localhost"}, ips: []string{"127.0.0.1"}},
}

// cas: name and common name of the two CAs.
var cas = [][2]string{
	{"ca", "gpufleet-real-cluster-ca"},
	{"front-proxy-ca", "gpufleet-real-cluster-front-proxy-ca"},
}

type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		die("%v", err)
	}
	return n.Add(n, big.NewInt(1))
}

func newECKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		die("generating a P-256 key: %v", err)
	}
	return k
}

// newCA is a self-signed CA certificate (P-256, 30 days).
func newCA(cn string, now time.Time) keyPair {
	key := newECKey()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		die("creating the CA %s: %v", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		die("%v", err)
	}
	return keyPair{cert, key}
}

// newLeaf signs spec with ca: not a CA, digitalSignature and
// keyEncipherment, the spec's extended key usage and SANs.
func newLeaf(spec certSpec, ca keyPair, now time.Time) keyPair {
	key := newECKey()
	subj := pkix.Name{CommonName: spec.cn}
	if spec.org != "" {
		subj.Organization = []string{spec.org}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               subj,
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{spec.eku},
		DNSNames:              spec.dns,
	}
	for _, ip := range spec.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		die("could not sign %s.crt: %v", spec.name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		die("%v", err)
	}
	return keyPair{cert, key}
}

func writePEM(path, typ string, der []byte, mode os.FileMode) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		die("%v", err)
	}
}

// writeKeyPair writes <dir>/<name>.crt and <name>.key (PKCS#8).
func writeKeyPair(dir, name string, kp keyPair) {
	writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", kp.cert.Raw, 0o644)
	der, err := x509.MarshalPKCS8PrivateKey(kp.key)
	if err != nil {
		die("%v", err)
	}
	writePEM(filepath.Join(dir, name+".key"), "PRIVATE KEY", der, 0o600)
}

// makePKI writes <state>/pki: the two CAs, every leaf of leafCerts and the
// service-account signing key pair (RSA 2048, sa.key and sa.pub).
func makePKI(dir string, now time.Time) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		die("%v", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		die("%v", err)
	}
	signers := map[string]keyPair{}
	for _, c := range cas {
		kp := newCA(c[1], now)
		writeKeyPair(dir, c[0], kp)
		signers[c[0]] = kp
	}
	for _, spec := range leafCerts {
		writeKeyPair(dir, spec.name, newLeaf(spec, signers[spec.ca], now))
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		die("could not create the service-account key: %v", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(sa)
	if err != nil {
		die("%v", err)
	}
	writePEM(filepath.Join(dir, "sa.key"), "PRIVATE KEY", der, 0o600)
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		die("%v", err)
	}
	writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub, 0o644)
}

// randomToken is 24 random bytes in hex (what `openssl rand -hex 24` gave).
func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		die("%v", err)
	}
	return hex.EncodeToString(b)
}

// tokenAuthCSV is kube-apiserver's --token-auth-file (token,user,uid,
// "groups"): one test Node identity, so tests of node-facing APIs (Mokka's
// node-agent API) can authenticate as a kubelet would, and two people for
// tests of who besides a Node may use such an API: alice, a cluster admin
// (system:masters, like kubeadm's admin), and bob, whom the cluster grants
// nothing.
func tokenAuthCSV(node, nodeToken, aliceToken, bobToken string) string {
	return fmt.Sprintf("%s,system:node:%s,node-%s,\"system:nodes\"\n", nodeToken, node, node) +
		fmt.Sprintf("%s,alice,alice-uid,\"system:masters\"\n", aliceToken) +
		fmt.Sprintf("%s,bob,bob-uid\n", bobToken)
}
