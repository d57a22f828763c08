//! Byte vectors made by the real Go encoder: a small program against
//! k8s.io/api and k8s.io/apimachinery v0.37.2 (from the Go module cache)
//! built the objects exactly as kubectl v0.37.2's `createDeployment`,
//! `createService` and `createJob` do (same fields, same values as the
//! commands in each test's name), encoded them with
//! `runtime/serializer/protobuf.NewSerializer(scheme, scheme).Encode` and
//! printed the bytes as hex.

use serde_json::json;

fn decode(body: &[u8]) -> Result<serde_json::Value, String> {
    super::decode_object(body).map_err(|e| e.to_string())
}

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

const DEPLOYMENT: &str = concat!(
    "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412f3010a1f0a0377656212001a",
    "0022002a003200380042005a0a0a03617070120377656212c1010803120c0a0a0a03617070120377",
    "65621aa6010a1c0a0012001a0022002a003200380042005a0a0a036170701203776562128501123f",
    "0a056e67696e78120a6e67696e783a312e32371a05736c6565701a0236302a00320b0a0010001890",
    "3f22002a0042006a007200800100880100900100a2010012260a0762757379626f78120762757379",
    "626f782a0042006a007200800100880100900100a201001a00320042004a00520058006000680082",
    "01008a01009a0100c2010022020a00280038001a0c0800100018002000280038001a002200",
);

const SERVICE_CLUSTERIP: &str = concat!(
    "6b3873000a0d0a0276311207536572766963651286010a1b0a017312001a0022002a003200380042",
    "005a080a0361707012017312630a1e0a09353637382d38303830120354435018ae2c220708001090",
    "3f1a0028000a1e0a0738302d6874747012035443501850220a080110001a0468747470280012080a",
    "036170701201731a002209436c757374657249503a00420052005a00600068001a020a001a002200",
);

const SERVICE_HEADLESS: &str = concat!(
    "6b3873000a0d0a027631120753657276696365124a0a1b0a017312001a0022002a00320038004200",
    "5a080a03617070120173122712080a036170701201731a044e6f6e652209436c757374657249503a",
    "00420052005a00600068001a020a001a002200",
);

const SERVICE_NODEPORT: &str = concat!(
    "6b3873000a0d0a02763112075365727669636512670a1b0a017312001a0022002a00320038004200",
    "5a080a0361707012017312440a200a09353637382d38303830120354435018ae2c2207080010903f",
    "1a002880eb0112080a036170701201731a0022084e6f6465506f72743a00420052005a0060006800",
    "1a020a001a002200",
);

const SERVICE_LOADBALANCER: &str = concat!(
    "6b3873000a0d0a02763112075365727669636512630a1b0a017312001a0022002a00320038004200",
    "5a080a0361707012017312400a180a03343433120354435018bb032207080010bb031a0028001208",
    "0a036170701201731a00220c4c6f616442616c616e6365723a00420052005a00600068001a020a00",
    "1a002200",
);

const SERVICE_EXTERNALNAME: &str = concat!(
    "6b3873000a0d0a02763112075365727669636512570a1b0a017312001a0022002a00320038004200",
    "5a080a03617070120173123412080a036170701201731a00220c45787465726e616c4e616d653a00",
    "4200520e64622e6578616d706c652e636f6d5a00600068001a020a001a002200",
);

const DEPLOYMENT_ZERO_REPLICAS_NODE_NAME: &str = concat!(
    "6b3873000a150a07617070732f7631120a4465706c6f796d656e74127d0a110a016412001a002200",
    "2a00320038004200125a08001a4e0a100a0012001a0022002a00320038004200123a121a0a016312",
    "01692a0042006a007200800100880100900100a201001a00320042004a0052026e31580060006800",
    "8201008a01009a0100c2010022020a00280038001a0c0800100018002000280038001a002200",
);

const JOB: &str = concat!(
    "6b3873000a0f0a0862617463682f763112034a6f621295010a180a02706912001a067465616d2d61",
    "22002a00320038004200126f326d0a100a0012001a0022002a00320038004200125912360a027069",
    "12097065726c3a352e33341a047065726c1a022d651a077072696e7420312a0042006a0072008001",
    "00880100900100a201001a054e65766572320042004a0052005800600068008201008a01009a0100",
    "c201001a082000280030003a001a002200",
);

const SECRET: &str = concat!(
    "6b3873000a0c0a027631120653656372657412390a120a02733112001a0022002a00320038004200",
    "120e0a07746c732e63727412030001021a116b756265726e657465732e696f2f746c7328011a0022",
    "00",
);

const SERVICEACCOUNT: &str = concat!(
    "6b3873000a140a027631120e536572766963654163636f756e7412150a130a0373613112001a0022",
    "002a003200380042001a002200",
);

const NAMESPACE: &str = concat!(
    "6b3873000a0f0a02763112094e616d657370616365121e0a160a067465616d2d6112001a0022002a",
    "0032003800420012001a020a001a002200",
);

const CONFIGMAP: &str = concat!(
    "6b3873000a0f0a0276311209436f6e6669674d6170121c0a120a02633112001a0022002a00320038",
    "00420012060a01611201621a002200",
);

/// `kubectl create deployment web --image=nginx:1.27 --image=busybox
/// --replicas=3 --port=8080 -- sleep 60` (name and labels `web`; kubectl
/// names containers after the images).
#[test]
fn create_deployment_decodes_every_field_the_generator_sets() {
    let value = decode(&bytes(DEPLOYMENT)).unwrap();
    assert_eq!(
        value,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {"name": "nginx", "image": "nginx:1.27", "command": ["sleep", "60"],
                         "ports": [{"containerPort": 8080}], "resources": {}},
                        {"name": "busybox", "image": "busybox", "resources": {}},
                    ]},
                },
            },
            "status": {},
        })
    );
}

/// `--replicas=0` is a written pointer and stays 0; `nodeName`, which
/// kubectl's generators never set, decodes like every other field.
#[test]
fn a_written_zero_pointer_is_kept() {
    let value = decode(&bytes(DEPLOYMENT_ZERO_REPLICAS_NODE_NAME)).unwrap();
    assert_eq!(value["spec"]["replicas"], json!(0));
    assert_eq!(value["spec"]["template"]["spec"]["nodeName"], json!("n1"));
    assert_eq!(
        value["spec"]["template"]["spec"]["containers"],
        json!([{"name": "c", "image": "i", "resources": {}}])
    );
}

/// `kubectl create service clusterip s --tcp=5678:8080 --tcp=80:http`
#[test]
fn create_service_clusterip_decodes_ports_and_named_target_ports() {
    assert_eq!(
        decode(&bytes(SERVICE_CLUSTERIP)).unwrap(),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "labels": {"app": "s"}},
            "spec": {
                "type": "ClusterIP",
                "selector": {"app": "s"},
                "ports": [
                    {"name": "5678-8080", "protocol": "TCP", "port": 5678, "targetPort": 8080},
                    {"name": "80-http", "protocol": "TCP", "port": 80, "targetPort": "http"},
                ],
            },
            "status": {"loadBalancer": {}},
        })
    );
}

/// `kubectl create service clusterip s --clusterip=None`
#[test]
fn create_service_headless_keeps_cluster_ip_none() {
    assert_eq!(
        decode(&bytes(SERVICE_HEADLESS)).unwrap()["spec"],
        json!({"type": "ClusterIP", "selector": {"app": "s"}, "clusterIP": "None"})
    );
}

/// `kubectl create service nodeport s --tcp=5678:8080 --node-port=30080`
#[test]
fn create_service_nodeport_keeps_the_node_port() {
    assert_eq!(
        decode(&bytes(SERVICE_NODEPORT)).unwrap()["spec"],
        json!({
            "type": "NodePort", "selector": {"app": "s"},
            "ports": [{"name": "5678-8080", "protocol": "TCP", "port": 5678, "targetPort": 8080, "nodePort": 30080}],
        })
    );
}

/// `kubectl create service loadbalancer s --tcp=443`
#[test]
fn create_service_loadbalancer_decodes() {
    assert_eq!(
        decode(&bytes(SERVICE_LOADBALANCER)).unwrap()["spec"],
        json!({
            "type": "LoadBalancer", "selector": {"app": "s"},
            "ports": [{"name": "443", "protocol": "TCP", "port": 443, "targetPort": 443}],
        })
    );
}

/// `kubectl create service externalname s --external-name=db.example.com`
#[test]
fn create_service_externalname_keeps_the_external_name() {
    assert_eq!(
        decode(&bytes(SERVICE_EXTERNALNAME)).unwrap()["spec"],
        json!({"type": "ExternalName", "selector": {"app": "s"}, "externalName": "db.example.com"})
    );
}

/// `kubectl create job pi -n team-a --image=perl:5.34 -- perl -e 'print 1'`
#[test]
fn create_job_decodes_the_container_and_restart_policy() {
    assert_eq!(
        decode(&bytes(JOB)).unwrap(),
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi", "namespace": "team-a"},
            "spec": {"template": {"metadata": {}, "spec": {
                "containers": [{"name": "pi", "image": "perl:5.34", "command": ["perl", "-e", "print 1"], "resources": {}}],
                "restartPolicy": "Never",
            }}},
            "status": {},
        })
    );
}

/// A field number the tables do not list at all is refused too.
#[test]
fn an_unknown_field_number_is_refused() {
    // Deployment { metadata = 1 { name = "d" }, 15 = "" } in the envelope.
    let raw = [0x0a, 0x03, 0x0a, 0x01, b'd', 0x7a, 0x00];
    let mut body = b"k8s\0".to_vec();
    body.extend([0x0a, 0x15, 0x0a, 0x07]);
    body.extend(b"apps/v1");
    body.extend([0x12, 0x0a]);
    body.extend(b"Deployment");
    body.extend([0x12, raw.len() as u8]);
    body.extend(raw);
    let error = decode(&body).unwrap_err();
    assert!(
        error.contains("number 15") && error.contains("Deployment"),
        "{error}"
    );
}

/// `kubectl create secret tls`-like: type, binary data (base64 in JSON)
/// and `immutable`.
#[test]
fn a_secret_decodes_binary_data_type_and_immutable() {
    assert_eq!(
        decode(&bytes(SECRET)).unwrap(),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s1"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": "AAEC"},
            "immutable": true,
        })
    );
}

/// `kubectl create serviceaccount sa1`, `create namespace team-a`,
/// `create configmap c1 --from-literal=a=b`: zero strings and times the
/// encoder writes leave nothing behind; its empty non-pointer structs stay
/// `{}`, as in the JSON the Go types write.
#[test]
fn serviceaccount_namespace_and_configmap_decode_as_the_go_types_write_json() {
    assert_eq!(
        decode(&bytes(SERVICEACCOUNT)).unwrap(),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa1"}})
    );
    assert_eq!(
        decode(&bytes(NAMESPACE)).unwrap(),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}, "spec": {}, "status": {}})
    );
    assert_eq!(
        decode(&bytes(CONFIGMAP)).unwrap(),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}, "data": {"a": "b"}})
    );
}
