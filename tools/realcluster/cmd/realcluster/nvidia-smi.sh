#!/bin/sh
# nvidia-smi stand-in for KWOK's local exec (written by scripts/real-cluster.sh).
# KWOK runs `kubectl exec POD -- nvidia-smi ...` on this host with the env of
# the kwok.x-k8s.io Exec (per pod) or ClusterExec (namespace default) that
# matches the pod. Which capture it prints:
#   1. $GPUFLEET_EXEC_FILE, if set (a path)
#   2. $GPUFLEET_REAL_EXEC_DIR/$GPUFLEET_EXEC_NODE.xml, if GPUFLEET_EXEC_NODE is set
#   3. $GPUFLEET_REAL_EXEC_DIR/default.xml, if it exists
# Optional per node: <node>.stderr is copied to stderr, <node>.rc is the exit
# code, <node>.hang makes the call hang; each call appends a line to <node>.log.
PATH=/usr/local/bin:/usr/bin:/bin
export PATH
dir=${GPUFLEET_REAL_EXEC_DIR:-@EXEC_DIR@}
case "$*" in
  "-q -x"|"-x -q"|"--query --xml-format"|"--xml-format --query") ;;
  *) echo "nvidia-smi (gpufleet real-cluster shim): only '-q -x' is supported, got: $*" >&2; exit 2 ;;
esac
if [ -n "${GPUFLEET_EXEC_FILE:-}" ]; then
  file=$GPUFLEET_EXEC_FILE; base=
elif [ -n "${GPUFLEET_EXEC_NODE:-}" ]; then
  base=$dir/$GPUFLEET_EXEC_NODE; file=$base.xml
elif [ -f "$dir/default.xml" ]; then
  base=$dir/default; file=$base.xml
else
  echo "nvidia-smi (gpufleet real-cluster shim): no capture chosen for pod ${GPUFLEET_EXEC_POD:-?}: create a kwok.x-k8s.io/v1alpha1 Exec named like the pod with env GPUFLEET_EXEC_NODE=<node>, or write $dir/default.xml" >&2
  exit 1
fi
# Every call is counted (one line per call in <node>.log), so tests can
# assert how often a node was collected; <node>.hang makes the call hang
# (bounded, so nothing lingers after the collector's timeout).
if [ -n "$base" ]; then
  date +%s >>"$base.log"
  if [ -f "$base.hang" ]; then exec sleep 30; fi
fi
rc=0
if [ -n "$base" ] && [ -f "$base.rc" ]; then rc=$(cat "$base.rc"); fi
if [ -f "$file" ]; then
  cat "$file"
elif [ "$rc" = 0 ]; then
  echo "nvidia-smi (gpufleet real-cluster shim): no capture $file (node ${GPUFLEET_EXEC_NODE:-?}, pod ${GPUFLEET_EXEC_POD:-?})" >&2
  exit 1
fi
if [ -n "$base" ] && [ -f "$base.stderr" ]; then cat "$base.stderr" >&2; fi
exit "$rc"
