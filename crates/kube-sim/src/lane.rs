//! Which API server an end-to-end test drives: kube-sim (the default) or
//! the real control plane that `scripts/real-cluster.sh up` starts.
//!
//! One switch for every crate's suite: `GPUFLEET_TEST_CLUSTER=sim|real`.
//! With `real`, `scripts/real-cluster.sh env` provides the kubeconfigs.

use std::path::{Path, PathBuf};

/// The variable that picks the lane.
pub const LANE_VARIABLE: &str = "GPUFLEET_TEST_CLUSTER";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lane {
    /// kube-sim in the test's own process.
    Sim,
    /// kube-apiserver, kube-controller-manager, kube-scheduler and KWOK on
    /// loopback.
    Real(RealCluster),
}

/// Where the real lane's files are (`scripts/real-cluster.sh env`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealCluster {
    /// The state directory of `real-cluster.sh` (`GPUFLEET_REAL_DIR`).
    pub dir: PathBuf,
    /// Cluster-admin kubeconfig (`GPUFLEET_REAL_ADMIN_KUBECONFIG`).
    pub admin_kubeconfig: PathBuf,
}

impl RealCluster {
    /// The restricted kubeconfig `real-cluster.sh` wrote for a controller's
    /// ServiceAccount (`<dir>/<name>.kubeconfig`).
    pub fn service_account_kubeconfig(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.kubeconfig"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    #[error("{LANE_VARIABLE}={value:?}: the value must be \"sim\" (the default) or \"real\"")]
    UnknownLane { value: String },
    #[error(
        "{LANE_VARIABLE}=real needs {variable}: start the lane with `scripts/real-cluster.sh up` and `eval \"$(scripts/real-cluster.sh env)\"`, or run `scripts/test.sh --real`"
    )]
    Missing { variable: &'static str },
    #[error("{path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
}

impl Lane {
    /// Reads the switch from the environment.
    pub fn from_env() -> Result<Lane, LaneError> {
        let value = std::env::var(LANE_VARIABLE).unwrap_or_default();
        Lane::parse(&value, |name| std::env::var_os(name).map(PathBuf::from))
    }

    /// [`Lane::from_env`] with the environment passed in.
    pub fn parse(
        value: &str,
        var: impl Fn(&'static str) -> Option<PathBuf>,
    ) -> Result<Lane, LaneError> {
        match value {
            "" | "sim" => Ok(Lane::Sim),
            "real" => {
                let need = |variable: &'static str| {
                    var(variable)
                        .filter(|path| !path.as_os_str().is_empty())
                        .ok_or(LaneError::Missing { variable })
                };
                Ok(Lane::Real(RealCluster {
                    dir: need("GPUFLEET_REAL_DIR")?,
                    admin_kubeconfig: need("GPUFLEET_REAL_ADMIN_KUBECONFIG")?,
                }))
            }
            other => Err(LaneError::UnknownLane {
                value: other.to_owned(),
            }),
        }
    }

    pub fn is_real(&self) -> bool {
        matches!(self, Lane::Real(_))
    }
}

/// A client for the cluster a kubeconfig file describes (its current
/// context).
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, LaneError> {
    let error = |message: String| LaneError::Kubeconfig {
        path: path.to_owned(),
        message,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| error(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| error(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| error(e.to_string()))
}

/// KWOK's `Exec` objects (`kwok.x-k8s.io/v1alpha1`) in `namespace`: on
/// the real lane, an `Exec` named like a pod lets its commands run on this
/// machine, which is how the real lane's tests exec into pods.
pub fn kwok_execs(client: &kube::Client, namespace: &str) -> kube::Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource {
        group: "kwok.x-k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "kwok.x-k8s.io/v1alpha1".into(),
        kind: "Exec".into(),
        plural: "execs".into(),
    };
    kube::Api::namespaced_with(client.clone(), namespace, &resource)
}

/// This machine's own address on its default route, for EndpointSlices
/// that lead an API server to a process here (a webhook server): both
/// kube-apiserver and kube-sim refuse loopback addresses in them. `None`
/// when the machine has no route off loopback. No packet is sent: a UDP
/// socket is only connected, which picks the route.
pub fn host_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    // TEST-NET-1 (RFC 5737): never answered, only routed.
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_sim_is_kube_sim_and_real_needs_the_lane_files() {
        let none = |_: &'static str| None;
        assert_eq!(Lane::parse("", none).unwrap(), Lane::Sim);
        assert_eq!(Lane::parse("sim", none).unwrap(), Lane::Sim);
        let missing = Lane::parse("real", none).unwrap_err().to_string();
        assert!(missing.contains("GPUFLEET_REAL_DIR"), "{missing}");
        let real = Lane::parse("real", |name| Some(PathBuf::from(format!("/x/{name}")))).unwrap();
        assert!(real.is_real());
        let unknown = Lane::parse("kind", none).unwrap_err().to_string();
        assert!(
            unknown.contains("GPUFLEET_TEST_CLUSTER=\"kind\""),
            "{unknown}"
        );
    }
}
