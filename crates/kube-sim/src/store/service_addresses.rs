//! Cluster IPs and node ports, allocated when a Service is created, as
//! kube-apiserver's Service registry does: the create answer already
//! carries them, so a client reads `spec.clusterIP` without waiting.
//!
//! The addresses in use are learnt from the stored Services the first time
//! one is needed (which also covers a store restored from a data
//! directory); after that a create holds what it allocates, and committed
//! updates and deletes release what the Service held before.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Value, json};

use crate::kubelet::ipam::Ipv4Pool;

/// The default `--service-node-port-range`.
const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

#[derive(Debug)]
pub(super) struct ServiceAddresses {
    pool: Ipv4Pool,
    ips: HashSet<Ipv4Addr>,
    node_ports: HashSet<u16>,
    next_node_port: u16,
}

/// The cluster IPs and node ports a Service holds.
fn held(service: &Value) -> (Vec<Ipv4Addr>, Vec<u16>) {
    let spec = service.get("spec");
    let ips = spec
        .and_then(|s| s.get("clusterIPs"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(spec.and_then(|s| s.get("clusterIP")))
        .filter_map(Value::as_str)
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let ports = spec
        .and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter_map(|p| u16::try_from(p).ok())
        .collect();
    (ips, ports)
}

impl ServiceAddresses {
    /// What the given stored Services hold.
    pub(super) fn from_services<'a>(services: impl Iterator<Item = &'a Value>) -> Self {
        let mut addresses = Self {
            pool: Ipv4Pool::service_cidr(),
            ips: HashSet::new(),
            node_ports: HashSet::new(),
            next_node_port: *NODE_PORTS.start(),
        };
        for service in services {
            addresses.hold(service);
        }
        addresses
    }

    pub(super) fn hold(&mut self, service: &Value) {
        let (ips, ports) = held(service);
        self.ips.extend(ips);
        self.node_ports.extend(ports);
    }

    pub(super) fn release(&mut self, service: &Value) {
        let (ips, ports) = held(service);
        for ip in ips {
            self.ips.remove(&ip);
        }
        for port in ports {
            self.node_ports.remove(&port);
        }
    }

    /// Fills in a new Service's cluster IP (unless it is headless or an
    /// ExternalName) and the node ports of a NodePort or LoadBalancer
    /// Service. Values the client chose are kept.
    pub(super) fn allocate(&mut self, service: &mut Value) {
        let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        let kind = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_string();
        if kind == "ExternalName" {
            return;
        }
        let chosen = spec
            .get("clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
            .map(str::to_string);
        let ip = match chosen {
            Some(ip) => Some(ip),
            None => self.pool.allocate(&self.ips).map(|ip| ip.to_string()),
        };
        if let Some(ip) = ip {
            if let Ok(parsed) = ip.parse::<Ipv4Addr>() {
                self.ips.insert(parsed);
            }
            spec.insert("clusterIP".into(), json!(ip));
            if spec
                .get("clusterIPs")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                spec.insert("clusterIPs".into(), json!([ip]));
            }
        }
        if kind != "NodePort" && kind != "LoadBalancer" {
            return;
        }
        let ports = spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut);
        for port in ports {
            match port.get("nodePort").and_then(Value::as_u64) {
                Some(chosen) if chosen != 0 => {
                    if let Ok(chosen) = u16::try_from(chosen) {
                        self.node_ports.insert(chosen);
                    }
                }
                _ => {
                    if let Some(free) = self.free_node_port() {
                        port.insert("nodePort".into(), json!(free));
                    }
                }
            }
        }
    }

    /// The next node port after the last one handed out that is free.
    fn free_node_port(&mut self) -> Option<u16> {
        let span = NODE_PORTS.end() - NODE_PORTS.start() + 1;
        for _ in 0..span {
            let port = self.next_node_port;
            self.next_node_port = if port >= *NODE_PORTS.end() {
                *NODE_PORTS.start()
            } else {
                port + 1
            };
            if self.node_ports.insert(port) {
                return Some(port);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_service_gets_a_free_address_and_node_ports_in_the_default_range() {
        let taken =
            json!({"spec": {"clusterIP": "10.96.0.2", "ports": [{"port": 1, "nodePort": 30000}]}});
        let mut addresses = ServiceAddresses::from_services([&taken].into_iter());
        let mut service = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 31000}]}});
        addresses.allocate(&mut service);
        assert_eq!(service["spec"]["clusterIP"], "10.96.0.3");
        assert_eq!(service["spec"]["clusterIPs"], json!(["10.96.0.3"]));
        assert_eq!(service["spec"]["ports"][0]["nodePort"], 30001);
        assert_eq!(service["spec"]["ports"][1]["nodePort"], 31000);
        // Released addresses are free again; held ones never repeat.
        let mut again = json!({"spec": {}});
        addresses.allocate(&mut again);
        assert_eq!(again["spec"]["clusterIP"], "10.96.0.4");
        addresses.release(&taken);
        assert!(!addresses.ips.contains(&"10.96.0.2".parse().unwrap()));
    }

    #[test]
    fn headless_and_external_name_services_get_no_address() {
        let mut addresses = ServiceAddresses::from_services(std::iter::empty());
        let mut headless = json!({"spec": {"clusterIP": "None"}});
        addresses.allocate(&mut headless);
        assert_eq!(headless["spec"]["clusterIP"], "None");
        let mut external = json!({"spec": {"type": "ExternalName", "externalName": "example.com"}});
        addresses.allocate(&mut external);
        assert!(external["spec"].get("clusterIP").is_none());
    }
}
