package main

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMakePKI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	now := time.Now()
	makePKI(dir, now)
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("pki dir mode %v", st.Mode().Perm())
	}
	pools := map[string]*x509.CertPool{}
	for _, c := range cas {
		ca := readCert(t, filepath.Join(dir, c[0]+".crt"))
		if !ca.IsCA || ca.Subject.CommonName != c[1] || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
			t.Errorf("%s: not the CA %s", c[0], c[1])
		}
		pools[c[0]] = x509.NewCertPool()
		pools[c[0]].AddCert(ca)
	}
	for _, spec := range leafCerts {
		crt := filepath.Join(dir, spec.name+".crt")
		key := filepath.Join(dir, spec.name+".key")
		c := readCert(t, crt)
		if _, err := c.Verify(x509.VerifyOptions{Roots: pools[spec.ca], KeyUsages: []x509.ExtKeyUsage{spec.eku}}); err != nil {
			t.Errorf("%s: does not verify against %s: %v", spec.name, spec.ca, err)
		}
		if c.IsCA || c.Subject.CommonName != spec.cn {
			t.Errorf("%s: subject %v", spec.name, c.Subject)
		}
		if org := c.Subject.Organization; (spec.org == "") != (len(org) == 0) || (spec.org != "" && org[0] != spec.org) {
			t.Errorf("%s: organization %v, want %q", spec.name, org, spec.org)
		}
		if c.NotAfter.Sub(now) < 29*24*time.Hour {
			t.Errorf("%s: expires %v", spec.name, c.NotAfter)
		}
		if _, err := tls.LoadX509KeyPair(crt, key); err != nil {
			t.Errorf("%s: key pair: %v", spec.name, err)
		}
		if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
			t.Errorf("%s.key mode %v", spec.name, st.Mode().Perm())
		}
		kb, _ := os.ReadFile(key)
		block, _ := pem.Decode(kb)
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if _, ec := k.(*ecdsa.PrivateKey); err != nil || block.Type != "PRIVATE KEY" || !ec {
			t.Errorf("%s.key: not an EC key in PKCS#8 (%s, %v)", spec.name, block.Type, err)
		}
	}
	api := readCert(t, filepath.Join(dir, "apiserver.crt"))
	for _, name := range []string{"localhost", "kubernetes.default.svc.cluster.local"} {
		if err := api.VerifyHostname(name); err != nil {
			t.Error(err)
		}
	}
	for _, ip := range []string{"127.0.0.1", "10.96.0.1"} {
		if err := api.VerifyHostname(ip); err != nil {
			t.Error(err)
		}
	}
	if !slices.Contains(readCert(t, filepath.Join(dir, "admin.crt")).Subject.Organization, "system:masters") {
		t.Error("admin is not in system:masters")
	}
	kb, _ := os.ReadFile(filepath.Join(dir, "sa.key"))
	block, _ := pem.Decode(kb)
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := k.(*rsa.PrivateKey)
	if !ok || priv.N.BitLen() != 2048 {
		t.Fatalf("sa.key is not RSA 2048")
	}
	pb, _ := os.ReadFile(filepath.Join(dir, "sa.pub"))
	block, _ = pem.Decode(pb)
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil || block.Type != "PUBLIC KEY" || !priv.PublicKey.Equal(pub) {
		t.Errorf("sa.pub is not sa.key's public key (%v)", err)
	}
}
