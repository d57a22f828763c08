"""Drives the Kubeflow training SDK (kubeflow-training 1.9.3) against a
cluster where our TFJob operator runs; prints one JSON object of what it saw.

Arguments: kubeconfig, namespace, then the annotations (JSON) that make the
simulated containers end. TFJob "applied" exists already, stored without
runPolicy, replicas or restartPolicy, as upstream's dist-mnist example is
written; "from-sdk" is made here with the SDK's own models.
"""
import json
import sys

from kubeflow.training import TrainingClient, models
from kubernetes.client import V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec

kubeconfig, namespace, annotations = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = TrainingClient(config_file=kubeconfig, namespace=namespace, job_kind="TFJob")
seen = {}

# get_job builds the SDK's model, which raises on a TFJob without runPolicy.
applied = client.get_job("applied")
seen["applied_run_policy"] = applied.spec.run_policy.to_dict()
seen["applied_replica_specs"] = {
    kind: {"replicas": spec.replicas, "restart_policy": spec.restart_policy}
    for kind, spec in applied.spec.tf_replica_specs.items()
}
done = client.wait_for_job_conditions(
    "applied", expected_conditions={"Succeeded"}, wait_timeout=120, polling_interval=1
)
seen["applied_true_conditions"] = [c.type for c in done.status.conditions if c.status == "True"]
seen["applied_pods"] = sorted(client.get_job_pod_names("applied"))
seen["applied_worker_0"] = client.get_job_pod_names("applied", replica_type="worker", replica_index=0)

template = V1PodTemplateSpec(
    metadata=V1ObjectMeta(annotations=annotations),
    spec=V1PodSpec(containers=[V1Container(name="tensorflow", image="tensorflow/tensorflow:2.15.0")]),
)
job = models.KubeflowOrgV1TFJob(
    api_version="kubeflow.org/v1",
    kind="TFJob",
    metadata=V1ObjectMeta(name="from-sdk"),
    spec=models.KubeflowOrgV1TFJobSpec(
        run_policy=models.KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
        tf_replica_specs={
            "Worker": models.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy="Never", template=template)
        },
    ),
)
client.create_job(job=job)
done = client.wait_for_job_conditions(
    "from-sdk", expected_conditions={"Succeeded"}, wait_timeout=120, polling_interval=1
)
seen["sdk_true_conditions"] = [c.type for c in done.status.conditions if c.status == "True"]
seen["sdk_pods"] = sorted(client.get_job_pod_names("from-sdk"))
print(json.dumps(seen))
