//! Address pools: cluster IPs for Services, addresses for simulated nodes
//! and pods. An address is never handed out while it is still in use.

use std::collections::HashSet;
use std::net::Ipv4Addr;

/// A range of IPv4 addresses handed out round-robin, skipping used ones.
#[derive(Debug, Clone)]
pub struct Ipv4Pool {
    first: u32,
    size: u32,
    cursor: u32,
}

impl Ipv4Pool {
    /// Addresses `base + skip .. base + 2^(32-prefix) - 1` (the last one is
    /// the broadcast address and never used).
    pub fn new(base: Ipv4Addr, prefix: u8, skip: u32) -> Self {
        let span = 1u64 << (32 - u32::from(prefix.min(30)));
        let size = (span as u32).saturating_sub(skip + 1);
        Self {
            first: u32::from(base) + skip,
            size,
            cursor: 0,
        }
    }

    /// The Service range `10.96.0.0/12`; `.0` is the network and `.1` the
    /// `kubernetes` Service, so allocation starts at `10.96.0.2`.
    pub fn service_cidr() -> Self {
        Self::new(Ipv4Addr::new(10, 96, 0, 0), 12, 2)
    }

    #[cfg(test)]
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        ip >= self.first && ip - self.first < self.size
    }

    /// The next free address after the last one handed out.
    pub fn allocate(&mut self, in_use: &HashSet<Ipv4Addr>) -> Option<Ipv4Addr> {
        self.allocate_unless(|ip| in_use.contains(ip))
    }

    /// The next address after the last one handed out for which `used` is false.
    pub fn allocate_unless(&mut self, used: impl Fn(&Ipv4Addr) -> bool) -> Option<Ipv4Addr> {
        for _ in 0..self.size {
            let ip = Ipv4Addr::from(self.first + self.cursor);
            self.cursor = (self.cursor + 1) % self.size.max(1);
            if !used(&ip) {
                return Some(ip);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ips_start_after_the_kubernetes_service_and_stay_in_range() {
        let mut pool = Ipv4Pool::service_cidr();
        let ip = pool.allocate(&HashSet::new()).unwrap();
        assert_eq!(ip, Ipv4Addr::new(10, 96, 0, 2));
        assert!(pool.contains(Ipv4Addr::new(10, 111, 255, 254)));
        assert!(!pool.contains(Ipv4Addr::new(10, 112, 0, 0)));
        assert!(!pool.contains(Ipv4Addr::new(10, 96, 0, 1)));
    }

    #[test]
    fn addresses_in_use_are_skipped_and_a_full_pool_says_so() {
        let mut pool = Ipv4Pool::new(Ipv4Addr::new(192, 168, 0, 0), 30, 1);
        // /30: .1 and .2 usable (.0 skipped, .3 broadcast).
        let used: HashSet<_> = [Ipv4Addr::new(192, 168, 0, 1)].into();
        assert_eq!(pool.allocate(&used), Some(Ipv4Addr::new(192, 168, 0, 2)));
        let all: HashSet<_> = [Ipv4Addr::new(192, 168, 0, 1), Ipv4Addr::new(192, 168, 0, 2)].into();
        assert_eq!(pool.allocate(&all), None);
    }

    #[test]
    fn released_addresses_are_not_reused_at_once() {
        let mut pool = Ipv4Pool::new(Ipv4Addr::new(10, 0, 0, 0), 24, 1);
        let a = pool.allocate(&HashSet::new()).unwrap();
        let b = pool.allocate(&[a].into()).unwrap();
        // `a` was released, but round-robin moves on.
        let c = pool.allocate(&[b].into()).unwrap();
        assert_ne!(a, b);
        assert_ne!(c, a);
        assert_ne!(c, b);
    }
}
