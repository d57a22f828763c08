package main

import (
	"strings"
	"testing"
)

const podComplete = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.ownerReferences.[].kind'
      operator: 'In'
      values:
      - 'Job'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
`

func TestPatchPodComplete(t *testing.T) {
	got := patchPodComplete(podComplete)
	want := strings.Replace(podComplete, "      - 'Job'\n", "      - 'Job'\n"+
		`    - key: '(.metadata.annotations // {}) | has("kube-sim.gpufleet.dev/run-seconds")'
      operator: 'In'
      values:
      - 'false'
`, 1)
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// Like awk, a last line without its newline gets one.
	if got := patchPodComplete("a\nb"); got != "a\nb\n" {
		t.Errorf("got %q", got)
	}
}

func TestRenderKwokConfig(t *testing.T) {
	got := renderKwokConfig("/s", 31000, []stageFile{
		{"node-initialize.yaml", "kind: Stage\nname: node-initialize\n"},
		{"pod-complete.yaml", podComplete},
		{"pod-ready.yaml", "kind: Stage\nname: pod-ready\n"},
	})
	for _, want := range []string{
		"kind: KwokConfiguration\n",
		"  manageNodesWithAnnotationSelector: 'kwok.x-k8s.io/node=fake'\n",
		"  nodePort: 31000\n  serverAddress: 127.0.0.1:31000\n",
		"  tlsCertFile: /s/pki/kwok-serving.crt\n  tlsPrivateKeyFile: /s/pki/kwok-serving.key\n",
		"  enableCRDs:\n  - Exec\n---\nkind: Stage\nname: node-initialize\n---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: pod-complete\n",
		`has("kube-sim.gpufleet.dev/run-seconds")`,
		"---\nkind: Stage\nname: pod-ready\n---\n# Containers of a pod annotated",
		"  name: gpufleet-container-exit\n",
		"  name: gpufleet-container-restart\n",
		"      workDir: /s/exec\n      envs:\n      - name: GPUFLEET_REAL_EXEC_DIR\n        value: /s/exec\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("kwok.yaml lacks\n%s\n---- in ----\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n---\n"); n != 6 {
		t.Errorf("%d document separators, want 6 (3 stages of KWOK, 2 of ours, the ClusterExec)", n)
	}
	if !strings.HasSuffix(got, "        value: /s/exec\n") {
		t.Error("the ClusterExec is not last")
	}
}

func TestRenderShim(t *testing.T) {
	got := renderShim("/s")
	if !strings.HasPrefix(got, "#!/bin/sh\n") {
		t.Error("not a shell script")
	}
	if !strings.Contains(got, "dir=${GPUFLEET_REAL_EXEC_DIR:-/s/exec}\n") || strings.Contains(got, "@EXEC_DIR@") {
		t.Errorf("the default capture dir is not filled in:\n%s", got)
	}
}
