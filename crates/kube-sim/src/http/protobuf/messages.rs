//! The messages of the objects kubectl's generators send (`create
//! deployment`, `create service …`, `create job`, `create token`, `create configmap`,
//! `create secret`, `create namespace`, `create serviceaccount`, `create
//! role|clusterrole|rolebinding|clusterrolebinding`), with field numbers
//! from k8s.io/api and k8s.io/apimachinery v0.37.2 (`generated.proto`).
//!
//! Every field number the Go encoder may write is listed: the ones those
//! generators can set decode, the rest are [`Kind::Unset`] (accepted only at
//! their zero value, which gogo writes for every plain field).

use super::schema::Kind::*;
use super::schema::{Message, field};

// ---- meta/v1 -------------------------------------------------------------

pub static OBJECT_META: Message = Message {
    name: "ObjectMeta",
    fields: &[
        field(1, "name", Str),
        field(2, "generateName", Str),
        field(3, "namespace", Str),
        field(4, "selfLink", Unset),
        field(5, "uid", Unset),
        field(6, "resourceVersion", Str),
        field(7, "generation", Unset),
        field(8, "creationTimestamp", Unset),
        field(9, "deletionTimestamp", Unset),
        field(10, "deletionGracePeriodSeconds", Unset),
        field(11, "labels", StringMap),
        field(12, "annotations", StringMap),
        field(13, "ownerReferences", Msgs(&OWNER_REFERENCE)),
        field(14, "finalizers", Strs),
        field(17, "managedFields", Unset),
    ],
};

static OWNER_REFERENCE: Message = Message {
    name: "OwnerReference",
    fields: &[
        field(1, "kind", Str),
        field(3, "name", Str),
        field(4, "uid", Str),
        field(5, "apiVersion", Str),
        field(6, "controller", OptBool),
        field(7, "blockOwnerDeletion", OptBool),
    ],
};

pub static LABEL_SELECTOR: Message = Message {
    name: "LabelSelector",
    fields: &[
        field(1, "matchLabels", StringMap),
        field(2, "matchExpressions", Msgs(&LABEL_SELECTOR_REQUIREMENT)),
    ],
};

static LABEL_SELECTOR_REQUIREMENT: Message = Message {
    name: "LabelSelectorRequirement",
    fields: &[
        field(1, "key", Str),
        field(2, "operator", Str),
        field(3, "values", Strs),
    ],
};

// ---- core/v1 pods --------------------------------------------------------

static POD_TEMPLATE_SPEC: Message = Message {
    name: "PodTemplateSpec",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "spec", Msg(&POD_SPEC)),
    ],
};

static POD_SPEC: Message = Message {
    name: "PodSpec",
    fields: &[
        field(1, "volumes", Unset),
        field(2, "containers", Msgs(&CONTAINER)),
        field(3, "restartPolicy", Str),
        field(4, "terminationGracePeriodSeconds", Unset),
        field(5, "activeDeadlineSeconds", Unset),
        field(6, "dnsPolicy", Unset),
        field(7, "nodeSelector", Unset),
        field(8, "serviceAccountName", Unset),
        field(9, "serviceAccount", Unset),
        field(10, "nodeName", Unset),
        field(11, "hostNetwork", Unset),
        field(12, "hostPID", Unset),
        field(13, "hostIPC", Unset),
        field(14, "securityContext", Unset),
        field(15, "imagePullSecrets", Unset),
        field(16, "hostname", Unset),
        field(17, "subdomain", Unset),
        field(18, "affinity", Unset),
        field(19, "schedulerName", Unset),
        field(20, "initContainers", Unset),
        field(21, "automountServiceAccountToken", Unset),
        field(22, "tolerations", Unset),
        field(23, "hostAliases", Unset),
        field(24, "priorityClassName", Unset),
        field(25, "priority", Unset),
        field(26, "dnsConfig", Unset),
        field(27, "shareProcessNamespace", Unset),
        field(28, "readinessGates", Unset),
        field(29, "runtimeClassName", Unset),
        field(30, "enableServiceLinks", Unset),
        field(31, "preemptionPolicy", Unset),
        field(32, "overhead", Unset),
        field(33, "topologySpreadConstraints", Unset),
        field(34, "ephemeralContainers", Unset),
        field(35, "setHostnameAsFQDN", Unset),
        field(36, "os", Unset),
        field(37, "hostUsers", Unset),
        field(38, "schedulingGates", Unset),
        field(39, "resourceClaims", Unset),
        field(40, "resources", Unset),
        field(41, "hostnameOverride", Unset),
        field(43, "schedulingGroup", Unset),
        field(44, "evictionResponders", Unset),
    ],
};

static CONTAINER: Message = Message {
    name: "Container",
    fields: &[
        field(1, "name", Str),
        field(2, "image", Str),
        field(3, "command", Strs),
        field(4, "args", Strs),
        field(5, "workingDir", Unset),
        field(6, "ports", Msgs(&CONTAINER_PORT)),
        field(7, "env", Unset),
        field(8, "resources", Msg(&RESOURCE_REQUIREMENTS)),
        field(9, "volumeMounts", Unset),
        field(10, "livenessProbe", Unset),
        field(11, "readinessProbe", Unset),
        field(12, "lifecycle", Unset),
        field(13, "terminationMessagePath", Unset),
        field(14, "imagePullPolicy", Unset),
        field(15, "securityContext", Unset),
        field(16, "stdin", Unset),
        field(17, "stdinOnce", Unset),
        field(18, "tty", Unset),
        field(19, "envFrom", Unset),
        field(20, "terminationMessagePolicy", Unset),
        field(21, "volumeDevices", Unset),
        field(22, "startupProbe", Unset),
        field(23, "resizePolicy", Unset),
        field(24, "restartPolicy", Unset),
        field(25, "restartPolicyRules", Unset),
    ],
};

/// Written (empty) for every container; kubectl's generators set none of it.
static RESOURCE_REQUIREMENTS: Message = Message {
    name: "ResourceRequirements",
    fields: &[
        field(1, "limits", Unset),
        field(2, "requests", Unset),
        field(3, "claims", Unset),
    ],
};

static CONTAINER_PORT: Message = Message {
    name: "ContainerPort",
    fields: &[
        field(1, "name", Str),
        field(2, "hostPort", Int),
        field(3, "containerPort", Int),
        field(4, "protocol", Str),
        field(5, "hostIP", Str),
    ],
};

// ---- apps/v1 Deployment --------------------------------------------------

pub static DEPLOYMENT: Message = Message {
    name: "Deployment",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "spec", Msg(&DEPLOYMENT_SPEC)),
        field(3, "status", Msg(&DEPLOYMENT_STATUS)),
    ],
};

static DEPLOYMENT_SPEC: Message = Message {
    name: "DeploymentSpec",
    fields: &[
        field(1, "replicas", OptInt),
        field(2, "selector", Msg(&LABEL_SELECTOR)),
        field(3, "template", Msg(&POD_TEMPLATE_SPEC)),
        field(4, "strategy", Msg(&DEPLOYMENT_STRATEGY)),
        field(5, "minReadySeconds", Int),
        field(6, "revisionHistoryLimit", OptInt),
        field(7, "paused", Bool),
        field(9, "progressDeadlineSeconds", OptInt),
    ],
};

static DEPLOYMENT_STRATEGY: Message = Message {
    name: "DeploymentStrategy",
    fields: &[
        field(1, "type", Str),
        field(2, "rollingUpdate", Msg(&ROLLING_UPDATE_DEPLOYMENT)),
    ],
};

static ROLLING_UPDATE_DEPLOYMENT: Message = Message {
    name: "RollingUpdateDeployment",
    fields: &[
        field(1, "maxUnavailable", OptIntOrString),
        field(2, "maxSurge", OptIntOrString),
    ],
};

/// Written (all zero) on create; the server drops a Deployment's status then.
static DEPLOYMENT_STATUS: Message = Message {
    name: "DeploymentStatus",
    fields: &[
        field(1, "observedGeneration", Unset),
        field(2, "replicas", Unset),
        field(3, "updatedReplicas", Unset),
        field(4, "availableReplicas", Unset),
        field(5, "unavailableReplicas", Unset),
        field(6, "conditions", Unset),
        field(7, "readyReplicas", Unset),
        field(8, "collisionCount", Unset),
        field(9, "terminatingReplicas", Unset),
    ],
};

// ---- core/v1 Service -----------------------------------------------------

pub static SERVICE: Message = Message {
    name: "Service",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "spec", Msg(&SERVICE_SPEC)),
        field(3, "status", Msg(&SERVICE_STATUS)),
    ],
};

static SERVICE_SPEC: Message = Message {
    name: "ServiceSpec",
    fields: &[
        field(1, "ports", Msgs(&SERVICE_PORT)),
        field(2, "selector", StringMap),
        field(3, "clusterIP", Str),
        field(4, "type", Str),
        field(5, "externalIPs", Unset),
        field(7, "sessionAffinity", Unset),
        field(8, "loadBalancerIP", Unset),
        field(9, "loadBalancerSourceRanges", Unset),
        field(10, "externalName", Str),
        field(11, "externalTrafficPolicy", Unset),
        field(12, "healthCheckNodePort", Unset),
        field(13, "publishNotReadyAddresses", Unset),
        field(14, "sessionAffinityConfig", Unset),
        field(17, "ipFamilyPolicy", Unset),
        field(18, "clusterIPs", Unset),
        field(19, "ipFamilies", Unset),
        field(20, "allocateLoadBalancerNodePorts", Unset),
        field(21, "loadBalancerClass", Unset),
        field(22, "internalTrafficPolicy", Unset),
        field(23, "trafficDistribution", Unset),
    ],
};

static SERVICE_PORT: Message = Message {
    name: "ServicePort",
    fields: &[
        field(1, "name", Str),
        field(2, "protocol", Str),
        field(3, "port", Int),
        field(4, "targetPort", IntOrString),
        field(5, "nodePort", Int),
        field(6, "appProtocol", Unset),
    ],
};

static SERVICE_STATUS: Message = Message {
    name: "ServiceStatus",
    fields: &[
        field(1, "loadBalancer", Msg(&LOAD_BALANCER_STATUS)),
        field(2, "conditions", Unset),
    ],
};

static LOAD_BALANCER_STATUS: Message = Message {
    name: "LoadBalancerStatus",
    fields: &[field(1, "ingress", Unset)],
};

// ---- batch/v1 Job --------------------------------------------------------

pub static JOB: Message = Message {
    name: "Job",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "spec", Msg(&JOB_SPEC)),
        field(3, "status", Msg(&JOB_STATUS)),
    ],
};

static JOB_SPEC: Message = Message {
    name: "JobSpec",
    fields: &[
        field(1, "parallelism", OptInt),
        field(2, "completions", OptInt),
        field(3, "activeDeadlineSeconds", OptInt),
        field(4, "selector", Msg(&LABEL_SELECTOR)),
        field(5, "manualSelector", OptBool),
        field(6, "template", Msg(&POD_TEMPLATE_SPEC)),
        field(7, "backoffLimit", OptInt),
        field(8, "ttlSecondsAfterFinished", OptInt),
        field(9, "completionMode", Str),
        field(10, "suspend", OptBool),
        field(11, "podFailurePolicy", Unset),
        field(12, "backoffLimitPerIndex", Unset),
        field(13, "maxFailedIndexes", Unset),
        field(14, "podReplacementPolicy", Unset),
        field(15, "managedBy", Unset),
        field(16, "successPolicy", Unset),
        field(17, "scheduling", Unset),
    ],
};

/// Written (all zero) on create; the server drops a Job's status then.
static JOB_STATUS: Message = Message {
    name: "JobStatus",
    fields: &[
        field(1, "conditions", Unset),
        field(2, "startTime", Unset),
        field(3, "completionTime", Unset),
        field(4, "active", Unset),
        field(5, "succeeded", Unset),
        field(6, "failed", Unset),
        field(7, "completedIndexes", Unset),
        field(8, "uncountedTerminatedPods", Unset),
        field(9, "ready", Unset),
        field(10, "failedIndexes", Unset),
        field(11, "terminating", Unset),
    ],
};

// ---- core/v1 ConfigMap, Secret, Namespace, ServiceAccount ------------------

pub static CONFIG_MAP: Message = Message {
    name: "ConfigMap",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "data", StringMap),
        field(3, "binaryData", BytesMap),
        field(4, "immutable", OptBool),
    ],
};

pub static SECRET: Message = Message {
    name: "Secret",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "data", BytesMap),
        field(3, "type", Str),
        field(4, "stringData", StringMap),
        field(5, "immutable", OptBool),
    ],
};

pub static NAMESPACE: Message = Message {
    name: "Namespace",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "spec", Msg(&NAMESPACE_SPEC)),
        field(3, "status", Msg(&NAMESPACE_STATUS)),
    ],
};

static NAMESPACE_SPEC: Message = Message {
    name: "NamespaceSpec",
    fields: &[field(1, "finalizers", Strs)],
};

/// Written (empty) on create; the server sets the phase itself.
static NAMESPACE_STATUS: Message = Message {
    name: "NamespaceStatus",
    fields: &[field(1, "phase", Unset), field(2, "conditions", Unset)],
};

pub static SERVICE_ACCOUNT: Message = Message {
    name: "ServiceAccount",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "secrets", Unset),
        field(3, "imagePullSecrets", Unset),
        field(4, "automountServiceAccountToken", OptBool),
    ],
};

// ---- authentication/v1 TokenRequest (`kubectl create token`) --------------

pub static TOKEN_REQUEST: Message = Message {
    name: "TokenRequest",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "spec", Msg(&TOKEN_REQUEST_SPEC)),
        field(3, "status", Msg(&TOKEN_REQUEST_STATUS)),
    ],
};

static TOKEN_REQUEST_SPEC: Message = Message {
    name: "TokenRequestSpec",
    fields: &[
        field(1, "audiences", Strs),
        field(3, "boundObjectRef", Msg(&BOUND_OBJECT_REFERENCE)),
        field(4, "expirationSeconds", OptInt),
    ],
};

static BOUND_OBJECT_REFERENCE: Message = Message {
    name: "BoundObjectReference",
    fields: &[
        field(1, "kind", Str),
        field(2, "apiVersion", Str),
        field(3, "name", Str),
        field(4, "uid", Str),
    ],
};

/// Written (empty) by the client; the server fills it in.
static TOKEN_REQUEST_STATUS: Message = Message {
    name: "TokenRequestStatus",
    fields: &[
        field(1, "token", Unset),
        field(2, "expirationTimestamp", Unset),
    ],
};

// ---- rbac/v1 -------------------------------------------------------------

pub static ROLE: Message = Message {
    name: "Role",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "rules", Msgs(&POLICY_RULE)),
    ],
};

pub static CLUSTER_ROLE: Message = Message {
    name: "ClusterRole",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "rules", Msgs(&POLICY_RULE)),
        field(3, "aggregationRule", Msg(&AGGREGATION_RULE)),
    ],
};

static POLICY_RULE: Message = Message {
    name: "PolicyRule",
    fields: &[
        field(1, "verbs", Strs),
        field(2, "apiGroups", Strs),
        field(3, "resources", Strs),
        field(4, "resourceNames", Strs),
        field(5, "nonResourceURLs", Strs),
    ],
};

static AGGREGATION_RULE: Message = Message {
    name: "AggregationRule",
    fields: &[field(1, "clusterRoleSelectors", Msgs(&LABEL_SELECTOR))],
};

/// RoleBinding and ClusterRoleBinding share their fields.
pub static ROLE_BINDING: Message = Message {
    name: "RoleBinding",
    fields: &[
        field(1, "metadata", Msg(&OBJECT_META)),
        field(2, "subjects", Msgs(&SUBJECT)),
        field(3, "roleRef", Msg(&ROLE_REF)),
    ],
};

static SUBJECT: Message = Message {
    name: "Subject",
    fields: &[
        field(1, "kind", Str),
        field(2, "apiGroup", Str),
        field(3, "name", Str),
        field(4, "namespace", Str),
    ],
};

static ROLE_REF: Message = Message {
    name: "RoleRef",
    fields: &[
        field(1, "apiGroup", Str),
        field(2, "kind", Str),
        field(3, "name", Str),
    ],
};
