// Command goclient drives an API server the way Go controllers do: the
// typed clientset over protobuf, the OpenAPI v2 models kubectl validates
// with, informers, a leaderelection Lease lock,
// DeleteOptions preconditions, an Eviction, exec over SPDY and over
// WebSocket, and a controller-runtime manager whose client and cache use
// protobuf. It prints one line per
// check, with nothing server-specific in it (no UIDs, versions or times),
// and exits 1 on the first behaviour that differs from kube-apiserver's.
// The kube-sim suite runs it against kube-sim and against the real lane
// and compares the transcript with expected.txt.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/client-go/util/retry"
	"k8s.io/kube-openapi/pkg/util/proto"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var ctx = context.Background()

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "goclient: "+format+"\n", args...)
	os.Exit(1)
}

func must(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func eventually(what string, timeout time.Duration, check func() bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if check() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	fail("%s: not within %s", what, timeout)
}

func main() {
	if len(os.Args) != 3 {
		fail("usage: goclient KUBECONFIG NAMESPACE/POD (a running pod whose container has /bin/sh)")
	}
	config, err := clientcmd.BuildConfigFromFlags("", os.Args[1])
	must(err, "kubeconfig")
	config.ContentType = runtime.ContentTypeProtobuf
	config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	config.QPS, config.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(config)
	must(err, "clientset")
	ns := fmt.Sprintf("goclient-%06d", rand.Intn(1_000_000))
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err, "namespace")
	eventually("the namespace's default ServiceAccount or none is needed", 5*time.Second, func() bool { return true })
	defer cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})

	crud(cs, ns)
	openAPIV2(cs)
	services(cs, ns)
	preconditions(cs, ns)
	informer(cs, ns)
	watchList(cs, ns)
	leaderElection(cs, ns)
	eviction(cs, ns)
	remoteExec(config, cs, os.Args[2])
	controllerRuntime(config, ns)
}

// openAPIV2 fetches /openapi/v2 as kubectl's client-side validation does
// (client-go asks for gnostic protobuf), builds kube-openapi's models from
// it, and looks kinds up by their x-kubernetes-group-version-kind, as
// kubectl does.
func openAPIV2(cs *kubernetes.Clientset) {
	doc, err := cs.Discovery().OpenAPISchema()
	must(err, "the OpenAPI v2 document")
	models, err := proto.NewOpenAPIData(doc)
	must(err, "models from the OpenAPI v2 document")
	lookup := func(group, version, kind string) proto.Schema {
		for _, name := range models.ListModels() {
			model := models.LookupModel(name)
			gvks, _ := model.GetExtensions()["x-kubernetes-group-version-kind"].([]interface{})
			for _, entry := range gvks {
				gvk, _ := entry.(map[interface{}]interface{})
				if gvk["group"] == group && gvk["version"] == version && gvk["kind"] == kind {
					return model
				}
			}
		}
		return nil
	}
	describe := func(model proto.Schema) string {
		if model == nil {
			return "missing"
		}
		if _, isKind := model.(*proto.Kind); isKind {
			return "kind"
		}
		return "not-a-kind"
	}
	review := lookup("authentication.k8s.io", "v1", "TokenReview")
	token := false
	if kind, ok := review.(*proto.Kind); ok {
		if ref, ok := kind.Fields["spec"].(proto.Reference); ok {
			if spec, ok := ref.SubSchema().(*proto.Kind); ok {
				_, token = spec.Fields["token"]
			}
		}
	}
	say("openapi-v2 TokenReview=%s spec.token=%t ConfigMap=%s", describe(review), token,
		describe(lookup("", "v1", "ConfigMap")))
}

// typed is the CRUD surface every typed client shares.
type typed[T runtime.Object, L runtime.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	List(context.Context, metav1.ListOptions) (L, error)
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

func roundTrip[T interface {
	runtime.Object
	metav1.Object
}, L runtime.Object](kind string, c typed[T, L], obj T, count func(L) int) {
	obj.SetName("crud")
	obj.SetLabels(map[string]string{"goclient": "crud"})
	created, err := c.Create(ctx, obj, metav1.CreateOptions{})
	must(err, kind+" create")
	if created.GetUID() == "" || created.GetResourceVersion() == "" || created.GetCreationTimestamp().Time.IsZero() {
		fail("%s create: the answer lacks uid, resourceVersion or creationTimestamp", kind)
	}
	// Controllers of the real lane (the Deployment, Job and disruption
	// controllers) may write status between our get and update: retry on
	// conflict, as every Go controller does.
	var got, updated T
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		if got, err = c.Get(ctx, "crud", metav1.GetOptions{}); err != nil {
			return err
		}
		labels := got.GetLabels()
		labels["step"] = "updated"
		got.SetLabels(labels)
		updated, err = c.Update(ctx, got, metav1.UpdateOptions{})
		return err
	})
	must(err, kind+" update")
	if updated.GetResourceVersion() == created.GetResourceVersion() {
		fail("%s update: resourceVersion did not change", kind)
	}
	list, err := c.List(ctx, metav1.ListOptions{LabelSelector: "goclient=crud,step=updated"})
	must(err, kind+" list")
	patched, err := c.Patch(ctx, "crud", types.MergePatchType, []byte(`{"metadata":{"annotations":{"patched":"yes"}}}`), metav1.PatchOptions{})
	must(err, kind+" patch")
	// A stale update is a 409, as optimistic concurrency demands.
	_, err = c.Update(ctx, got, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		fail("%s stale update: want 409 Conflict, got %v", kind, err)
	}
	must(c.Delete(ctx, "crud", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}), kind+" delete")
	say("crud %s listed=%d annotation=%s stale-update=409", kind, count(list), patched.GetAnnotations()["patched"])
}

func crud(cs *kubernetes.Clientset, ns string) {
	roundTrip("ConfigMap", cs.CoreV1().ConfigMaps(ns), &corev1.ConfigMap{Data: map[string]string{"k": "v"}, BinaryData: map[string][]byte{"b": {0, 1}}},
		func(l *corev1.ConfigMapList) int { return len(l.Items) })
	roundTrip("Secret", cs.CoreV1().Secrets(ns), &corev1.Secret{Data: map[string][]byte{"k": []byte("v")}, Type: corev1.SecretTypeOpaque},
		func(l *corev1.SecretList) int { return len(l.Items) })
	roundTrip("ServiceAccount", cs.CoreV1().ServiceAccounts(ns), &corev1.ServiceAccount{},
		func(l *corev1.ServiceAccountList) int { return len(l.Items) })
	// No scheduler binds this pod: nothing else writes it.
	roundTrip("Pod", cs.CoreV1().Pods(ns), &corev1.Pod{Spec: corev1.PodSpec{SchedulerName: "none", Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{}}}}},
		func(l *corev1.PodList) int { return len(l.Items) })
	roundTrip("Deployment", cs.AppsV1().Deployments(ns), &appsv1.Deployment{Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](0),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "crud"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "crud"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
	}}, func(l *appsv1.DeploymentList) int { return len(l.Items) })
	roundTrip("Job", cs.BatchV1().Jobs(ns), &batchv1.Job{Spec: batchv1.JobSpec{
		BackoffLimit: ptr.To[int32](0), Suspend: ptr.To(true),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
	}}, func(l *batchv1.JobList) int { return len(l.Items) })
	roundTrip("Lease", cs.CoordinationV1().Leases(ns), &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](15), LeaseTransitions: ptr.To[int32](0)}},
		func(l *coordinationv1.LeaseList) int { return len(l.Items) })
	roundTrip("Role", cs.RbacV1().Roles(ns), &rbacv1.Role{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}},
		func(l *rbacv1.RoleList) int { return len(l.Items) })
	roundTrip("RoleBinding", cs.RbacV1().RoleBindings(ns), &rbacv1.RoleBinding{RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "r"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: ns}}},
		func(l *rbacv1.RoleBindingList) int { return len(l.Items) })
	roundTrip("PodDisruptionBudget", cs.PolicyV1().PodDisruptionBudgets(ns), &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}}},
		func(l *policyv1.PodDisruptionBudgetList) int { return len(l.Items) })
	roundTrip("Event", cs.CoreV1().Events(ns), &corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: ns},
		Reason: "Created", Message: "m", Type: "Normal", Source: corev1.EventSource{Component: "goclient"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1},
		func(l *corev1.EventList) int { return len(l.Items) })
	roundTrip("events.k8s.io/Event", cs.EventsV1().Events(ns), &eventsv1.Event{EventTime: metav1.NowMicro(), ReportingController: "gpufleet.dev/goclient", ReportingInstance: "i",
		Action: "Create", Reason: "Created", Type: "Normal", Regarding: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: ns}},
		func(l *eventsv1.EventList) int { return len(l.Items) })
}

// services: a Go ServicePort with only Port set is sent with targetPort 0,
// and comes back targeting the port.
func services(cs *kubernetes.Clientset, ns string) {
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 8080}}}}, metav1.CreateOptions{})
	must(err, "service create")
	port := svc.Spec.Ports[0]
	say("service targetPort=%s protocol=%s type=%s", port.TargetPort.String(), port.Protocol, svc.Spec.Type)
}

func preconditions(cs *kubernetes.Clientset, ns string) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pre"}}, metav1.CreateOptions{})
	must(err, "precondition configmap")
	err = cs.CoreV1().ConfigMaps(ns).Delete(ctx, "pre", metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions("00000000-0000-0000-0000-000000000000")})
	wrong := "409"
	if !apierrors.IsConflict(err) {
		wrong = fmt.Sprintf("%v", err)
	}
	err = cs.CoreV1().ConfigMaps(ns).Delete(ctx, "pre", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion}})
	must(err, "delete with the right preconditions")
	_, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, "pre", metav1.GetOptions{})
	say("delete-preconditions wrong-uid=%s right=deleted gone=%t", wrong, apierrors.IsNotFound(err))
}

func informer(cs *kubernetes.Clientset, ns string) {
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 500*time.Millisecond, informers.WithNamespace(ns))
	inf := factory.Core().V1().ConfigMaps().Informer()
	var adds, updates, resyncs, deletes atomic.Int32
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if obj.(*corev1.ConfigMap).Labels["goclient"] == "informer" {
				adds.Add(1)
			}
		},
		UpdateFunc: func(old, obj any) {
			o, n := old.(*corev1.ConfigMap), obj.(*corev1.ConfigMap)
			if n.Labels["goclient"] != "informer" {
				return
			}
			if o.ResourceVersion == n.ResourceVersion {
				resyncs.Add(1)
			} else {
				updates.Add(1)
			}
		},
		DeleteFunc: func(obj any) {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Labels["goclient"] == "informer" {
				deletes.Add(1)
			}
		},
	})
	must(err, "event handler")
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		fail("informer: cache did not sync")
	}
	for _, name := range []string{"i1", "i2", "i3"} {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"goclient": "informer"}}}, metav1.CreateOptions{})
		must(err, "informer create")
	}
	_, err = cs.CoreV1().ConfigMaps(ns).Patch(ctx, "i1", types.MergePatchType, []byte(`{"data":{"x":"y"}}`), metav1.PatchOptions{})
	must(err, "informer patch")
	must(cs.CoreV1().ConfigMaps(ns).Delete(ctx, "i2", metav1.DeleteOptions{}), "informer delete")
	eventually("informer events", 10*time.Second, func() bool {
		return adds.Load() == 3 && updates.Load() == 1 && deletes.Load() == 1 && resyncs.Load() >= 2
	})
	say("informer adds=%d updates=%d deletes=%d resyncs>=2", adds.Load(), updates.Load(), deletes.Load())
}

// watchList: the streaming list informers use when WatchListClient is on:
// initial events, then a bookmark marking their end.
func watchList(cs *kubernetes.Clientset, ns string) {
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{
		LabelSelector: "goclient=informer", SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	must(err, "watch-list")
	defer w.Stop()
	initial := 0
	timeout := time.After(10 * time.Second)
	for {
		select {
		case event, ok := <-w.ResultChan():
			if !ok {
				fail("watch-list: the stream closed")
			}
			switch event.Type {
			case watch.Added:
				initial++
			case watch.Bookmark:
				cm := event.Object.(*corev1.ConfigMap)
				if cm.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
					say("watch-list initial=%d end-bookmark=true", initial)
					return
				}
			case watch.Error:
				fail("watch-list: %v", apierrors.FromObject(event.Object))
			}
		case <-timeout:
			fail("watch-list: no end-of-initial-events bookmark within 10s (saw %d events)", initial)
		}
	}
}

func leaderElection(cs *kubernetes.Clientset, ns string) {
	var order []string
	var mu sync.Mutex
	elector := func(id string) (*leaderelection.LeaderElector, context.CancelFunc, chan struct{}) {
		lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Name: "goclient", Namespace: ns}, Client: cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id}}
		done := make(chan struct{})
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { mu.Lock(); order = append(order, id); mu.Unlock() },
				OnStoppedLeading: func() {},
			},
		})
		must(err, "leader elector")
		c, cancel := context.WithCancel(ctx)
		go func() { le.Run(c); close(done) }()
		return le, cancel, done
	}
	a, cancelA, doneA := elector("a")
	eventually("a leads", 10*time.Second, a.IsLeader)
	b, cancelB, doneB := elector("b")
	time.Sleep(time.Second)
	if b.IsLeader() {
		fail("leader election: b leads while a holds the Lease")
	}
	cancelA()
	<-doneA
	eventually("b takes over after a releases", 10*time.Second, b.IsLeader)
	lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, "goclient", metav1.GetOptions{})
	must(err, "lease")
	cancelB()
	<-doneB
	mu.Lock()
	defer mu.Unlock()
	say("leader-election order=%v holder=%s transitions=%d", order, *lease.Spec.HolderIdentity, *lease.Spec.LeaseTransitions)
}

func eviction(cs *kubernetes.Clientset, ns string) {
	_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "evicted"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	must(err, "eviction pod")
	err = cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "evicted", Namespace: ns},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}})
	must(err, "evict")
	eventually("the evicted pod goes", 10*time.Second, func() bool {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "evicted", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	err = cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "missing", Namespace: ns}})
	say("eviction evicted=gone missing-pod=%t", apierrors.IsNotFound(err))
}

type annotator struct{ client client.Client }

func (r annotator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cm corev1.ConfigMap
	if err := r.client.Get(ctx, req.NamespacedName, &cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Labels["goclient"] != "reconcile" || cm.Annotations["reconciled"] == "true" {
		return reconcile.Result{}, nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations["reconciled"] = "true"
	return reconcile.Result{}, r.client.Patch(ctx, &cm, patch)
}

func controllerRuntime(config *rest.Config, ns string) {
	log.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	must(err, "manager")
	err = ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(annotator{client: mgr.GetClient()})
	must(err, "controller")
	c, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(c) }()
	cs := kubernetes.NewForConfigOrDie(config)
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cr", Labels: map[string]string{"goclient": "reconcile"}}}, metav1.CreateOptions{})
	must(err, "controller-runtime configmap")
	eventually("the manager's controller annotates the ConfigMap", 20*time.Second, func() bool {
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "cr", metav1.GetOptions{})
		return err == nil && cm.Annotations["reconciled"] == "true"
	})
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		fail("manager: %v", err)
	}
	say("controller-runtime reconciled=true")
}

// execScript reads a line of stdin and answers on both output streams. It
// exits 0: the real lane's KWOK reports a non-zero exit as an internal
// error where the kubelet (and kube-sim) send NonZeroExitCode, so exit
// codes are checked by the kube-sim suite alone.
const execScript = `read line; echo "out:$line"; echo "err:$line" >&2`

// remoteExec runs execScript in target (namespace/pod) through client-go's
// SPDY executor and its WebSocket executor.
func remoteExec(config *rest.Config, cs *kubernetes.Clientset, target string) {
	ns, pod, ok := strings.Cut(target, "/")
	if !ok {
		fail("exec target %q is not namespace/pod", target)
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"/bin/sh", "-c", execScript}, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec).
		URL()
	for _, transport := range []string{"spdy", "websocket"} {
		var executor remotecommand.Executor
		var err error
		if transport == "spdy" {
			executor, err = remotecommand.NewSPDYExecutor(config, "POST", url)
		} else {
			executor, err = remotecommand.NewWebSocketExecutor(config, "GET", url.String())
		}
		must(err, "exec over "+transport)
		var stdout, stderr bytes.Buffer
		err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("gpu\n"), Stdout: &stdout, Stderr: &stderr})
		code := 0
		var exitErr utilexec.ExitError
		if errors.As(err, &exitErr) {
			code = exitErr.ExitStatus()
		} else {
			must(err, "exec over "+transport)
		}
		say("exec %s stdout=%q stderr=%q exit=%d", transport, stdout.String(), stderr.String(), code)
	}
}
