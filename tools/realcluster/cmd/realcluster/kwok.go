package main

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// nvidiaSMIShim is the nvidia-smi stand-in KWOK's local exec runs;
// @EXEC_DIR@ becomes <state>/exec.
//
//go:embed nvidia-smi.sh
var nvidiaSMIShim string

// gpufleetStages are the two Stages that give KWOK kube-sim's container
// lifecycle (docs/kube-sim.md), so a test's pod manifests mean the same on
// both lanes. The text starts with its own "---".
//
//go:embed kwok-stages.yaml
var gpufleetStages string

// renderShim is the shim with its default capture directory filled in.
func renderShim(state string) string {
	return strings.Replace(nvidiaSMIShim, "@EXEC_DIR@", filepath.Join(state, "exec"), 1)
}

// stageFile is one of KWOK's own stage files from share/kwok.
type stageFile struct {
	name    string // base name
	content string
}

// jobSelector matches the selector value that makes KWOK's pod-complete
// stage act on a Job's pods.
var jobSelector = regexp.MustCompile(`^      - .Job.$`)

// jobRunSecondsCondition follows that value: a Job's pod that carries
// kube-sim's run-seconds annotation ends as the annotations say (stage
// gpufleet-container-exit), as on kube-sim, instead of succeeding at once.
const jobRunSecondsCondition = `    - key: '(.metadata.annotations // {}) | has("kube-sim.gpufleet.dev/run-seconds")'
      operator: 'In'
      values:
      - 'false'
`

// patchPodComplete adds jobRunSecondsCondition after the Job selector
// line(s) of pod-complete.yaml. Every line ends with a newline.
func patchPodComplete(content string) string {
	var b strings.Builder
	lines := strings.Split(content, "\n")
	if strings.HasSuffix(content, "\n") {
		lines = lines[:len(lines)-1]
	}
	for _, line := range lines {
		b.WriteString(line)
		b.WriteByte('\n')
		if jobSelector.MatchString(line) {
			b.WriteString(jobRunSecondsCondition)
		}
	}
	return b.String()
}

// renderKwokConfig is <state>/kwok/kwok.yaml: KWOK's configuration, its
// stages (node-* then pod-*, in name order, as given), the gpufleet stages
// and the ClusterExec that runs the nvidia-smi shim for gpu-operator pods.
func renderKwokConfig(state string, kwokPort int, stages []stageFile) string {
	var b strings.Builder
	pki := filepath.Join(state, "pki")
	fmt.Fprintf(&b, `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageNodesWithAnnotationSelector: '%s'
  nodeIP: 127.0.0.1
  nodePort: %d
  serverAddress: 127.0.0.1:%d
  tlsCertFile: %s
  tlsPrivateKeyFile: %s
  nodeLeaseDurationSeconds: 40
  cidr: 10.0.0.0/24
  enableDebuggingHandlers: true
  enableProfilingHandler: false
  enableContentionProfiling: false
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableCRDs:
  - Exec
`, kwokNodeSelector, kwokPort, kwokPort, filepath.Join(pki, "kwok-serving.crt"), filepath.Join(pki, "kwok-serving.key"))
	for _, s := range stages {
		b.WriteString("---\n")
		if s.name == "pod-complete.yaml" {
			b.WriteString(patchPodComplete(s.content))
		} else {
			b.WriteString(s.content)
		}
	}
	b.WriteString(gpufleetStages)
	exec := filepath.Join(state, "exec")
	fmt.Fprintf(&b, `---
# Default for every pod in gpu-operator: the nvidia-smi shim, no node chosen
# (prints exec/default.xml if it exists). A per-pod kwok.x-k8s.io Exec with
# env GPUFLEET_EXEC_NODE takes precedence.
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: gpufleet-nvidia-smi
spec:
  selector:
    matchNamespaces:
    - gpu-operator
  execs:
  - local:
      workDir: %s
      envs:
      - name: GPUFLEET_REAL_EXEC_DIR
        value: %s
`, exec, exec)
	return b.String()
}

// readStages reads share/kwok's node-*.yaml then pod-*.yaml, each group in
// name order.
func readStages(shareDir string) []stageFile {
	var out []stageFile
	for _, pattern := range []string{"node-*.yaml", "pod-*.yaml"} {
		files, err := filepath.Glob(filepath.Join(shareDir, pattern))
		if err != nil {
			die("%v", err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				die("%v", err)
			}
			out = append(out, stageFile{filepath.Base(f), string(b)})
		}
	}
	return out
}
