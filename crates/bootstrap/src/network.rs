//! Tenant network: CIDR parsing, the addresses kubeadm derives from the service range, and
//! validation with field-named errors (case B18).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::error::ValidationError;

/// Field path of the service ranges in the Cluster API `Cluster`.
pub const FIELD_SERVICE_CIDRS: &str = "clusterNetwork.services.cidrBlocks";
/// Field path of the pod ranges in the Cluster API `Cluster`.
pub const FIELD_POD_CIDRS: &str = "clusterNetwork.pods.cidrBlocks";
/// Field path of the cluster DNS domain in the Cluster API `Cluster`.
pub const FIELD_DNS_DOMAIN: &str = "clusterNetwork.serviceDomain";
/// Field path of the CoreDNS Service addresses in the KamajiControlPlane.
pub const FIELD_DNS_SERVICE_IPS: &str = "addons.coreDNS.dnsServiceIPs";

/// The default DNS domain (`cluster.local`), as kubeadm and Cluster API default it.
pub const DEFAULT_DNS_DOMAIN: &str = "cluster.local";

/// The network of a tenant as given by the user (strings, unvalidated).
///
/// Service and pod ranges come from `Cluster.spec.clusterNetwork`; `dns_service_ips` from
/// `KamajiControlPlane.spec.addons.coreDNS.dnsServiceIPs` (empty means "derive").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkSpec {
    /// Service CIDRs: one, or two of different families (dual-stack). The first is primary.
    pub service_cidrs: Vec<String>,
    /// Pod CIDRs: none, one, or two of different families.
    pub pod_cidrs: Vec<String>,
    /// Cluster DNS domain; empty means [`DEFAULT_DNS_DOMAIN`].
    pub dns_domain: String,
    /// CoreDNS Service addresses; empty means the 10th address of the first service CIDR.
    pub dns_service_ips: Vec<String>,
}

/// A validated tenant network. Only [`NetworkSpec::validate`] builds it, so every builder taking
/// a `TenantNetwork` can rely on the invariants checked there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantNetwork {
    service_cidrs: Vec<IpNet>,
    pod_cidrs: Vec<IpNet>,
    dns_domain: String,
    dns_service_ips: Vec<IpAddr>,
}

impl TenantNetwork {
    /// The service CIDRs, primary first.
    #[must_use]
    pub fn service_cidrs(&self) -> &[IpNet] {
        &self.service_cidrs
    }
    /// The pod CIDRs (possibly empty).
    #[must_use]
    pub fn pod_cidrs(&self) -> &[IpNet] {
        &self.pod_cidrs
    }
    /// The cluster DNS domain (never empty).
    #[must_use]
    pub fn dns_domain(&self) -> &str {
        &self.dns_domain
    }
    /// The CoreDNS Service addresses = kubelet `clusterDNS` (never empty).
    #[must_use]
    pub fn dns_service_ips(&self) -> &[IpAddr] {
        &self.dns_service_ips
    }
    /// The first address of the primary service CIDR: the ClusterIP of the tenant's
    /// `kubernetes` Service, which kubeadm puts in the API server certificate.
    #[must_use]
    pub fn api_server_service_ip(&self) -> IpAddr {
        // validate() guarantees at least one service CIDR large enough for index 10.
        self.service_cidrs
            .first()
            .and_then(|c| nth_address(c, 1))
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }
    /// Service CIDRs joined with commas (`--service-cluster-ip-range`, `serviceSubnet`).
    #[must_use]
    pub fn service_subnet(&self) -> String {
        join(&self.service_cidrs)
    }
    /// Pod CIDRs joined with commas (`--cluster-cidr`, `podSubnet`); empty if none.
    #[must_use]
    pub fn pod_subnet(&self) -> String {
        join(&self.pod_cidrs)
    }
}

fn join(nets: &[IpNet]) -> String {
    nets.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The `n`-th address of `net` counted from its network address (`n = 0` is the network
/// address itself), or `None` if the range is too small.
///
/// kubeadm uses `n = 1` for the API server Service IP and `n = 10` for the DNS Service IP.
#[must_use]
pub fn nth_address(net: &IpNet, n: u128) -> Option<IpAddr> {
    let host_bits = u32::from(net.max_prefix_len() - net.prefix_len());
    let size_ok = host_bits >= 128 || n < (1u128 << host_bits);
    if !size_ok {
        return None;
    }
    match net.network() {
        IpAddr::V4(a) => {
            let v = u128::from(u32::from(a)).checked_add(n)?;
            u32::try_from(v).ok().map(|v| IpAddr::V4(Ipv4Addr::from(v)))
        }
        IpAddr::V6(a) => u128::from(a)
            .checked_add(n)
            .map(|v| IpAddr::V6(Ipv6Addr::from(v))),
    }
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

fn parse_cidr(text: &str, field: &str) -> Result<IpNet, ValidationError> {
    let net: IpNet = text
        .trim()
        .parse()
        .map_err(|_| ValidationError::new(field, format!("{text:?} is not a CIDR")))?;
    if net.trunc() != net {
        return Err(ValidationError::new(
            field,
            format!("{text:?} has host bits set; use {}", net.trunc()),
        ));
    }
    Ok(net)
}

/// True for a DNS-1123 subdomain (lower-case labels of `[a-z0-9-]`, not starting or ending
/// with `-`, at most 253 characters).
#[must_use]
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn check_family_pair(nets: &[IpNet], field: &str) -> Result<(), ValidationError> {
    if nets.len() > 2 {
        return Err(ValidationError::new(
            field,
            "at most two ranges (one per IP family)",
        ));
    }
    if let [a, b] = nets
        && a.network().is_ipv4() == b.network().is_ipv4()
    {
        return Err(ValidationError::new(
            format!("{field}[1]"),
            "a second range must be of the other IP family (dual-stack)",
        ));
    }
    Ok(())
}

impl NetworkSpec {
    /// Validates the network and fills defaults.
    ///
    /// Checks, in order, with the field named in the error:
    /// - at least one service CIDR, each a valid network address (no host bits), IPv4 ranges
    ///   no larger than /12 and IPv6 no larger than /108 (kube-apiserver's limits), at most one
    ///   per family;
    /// - pod CIDRs valid, at most one per family, and **not overlapping** any service CIDR;
    /// - the DNS domain a DNS-1123 subdomain (default `cluster.local`);
    /// - each `dnsServiceIPs` entry an address **inside a service CIDR**, not its network
    ///   address and not the API server Service IP (the first address). When the list is empty
    ///   the 10th address of the primary service CIDR is used (kubeadm's rule).
    ///
    /// # Errors
    /// The first [`ValidationError`] found.
    pub fn validate(&self) -> Result<TenantNetwork, ValidationError> {
        let service_cidrs = self.checked_service_cidrs()?;
        let pod_cidrs = self.checked_pod_cidrs(&service_cidrs)?;
        let dns_domain = self.checked_dns_domain()?;
        let dns_service_ips = self.checked_dns_service_ips(&service_cidrs)?;
        Ok(TenantNetwork {
            service_cidrs,
            pod_cidrs,
            dns_domain,
            dns_service_ips,
        })
    }

    /// The service CIDRs ([`NetworkSpec::validate`]).
    fn checked_service_cidrs(&self) -> Result<Vec<IpNet>, ValidationError> {
        if self.service_cidrs.is_empty() {
            return Err(ValidationError::new(
                FIELD_SERVICE_CIDRS,
                "at least one service CIDR is required",
            ));
        }
        let mut service_cidrs = Vec::new();
        for (i, s) in self.service_cidrs.iter().enumerate() {
            let field = format!("{FIELD_SERVICE_CIDRS}[{i}]");
            let net = parse_cidr(s, &field)?;
            let (min_prefix, fam) = if net.network().is_ipv4() {
                (12, "IPv4")
            } else {
                (108, "IPv6")
            };
            if net.prefix_len() < min_prefix {
                return Err(ValidationError::new(
                    field,
                    format!(
                        "{net} is too large: an {fam} service range needs a prefix of at least /{min_prefix}"
                    ),
                ));
            }
            if nth_address(&net, 10).is_none() {
                return Err(ValidationError::new(
                    field,
                    format!("{net} is too small: it must hold at least 11 addresses"),
                ));
            }
            service_cidrs.push(net);
        }
        check_family_pair(&service_cidrs, FIELD_SERVICE_CIDRS)?;
        Ok(service_cidrs)
    }

    /// The pod CIDRs, none overlapping a service CIDR ([`NetworkSpec::validate`]).
    fn checked_pod_cidrs(&self, service_cidrs: &[IpNet]) -> Result<Vec<IpNet>, ValidationError> {
        let mut pod_cidrs = Vec::new();
        for (i, s) in self.pod_cidrs.iter().enumerate() {
            let field = format!("{FIELD_POD_CIDRS}[{i}]");
            let net = parse_cidr(s, &field)?;
            if let Some(svc) = service_cidrs.iter().find(|svc| overlaps(svc, &net)) {
                return Err(ValidationError::new(
                    field,
                    format!("pod range {net} overlaps the service range {svc}"),
                ));
            }
            pod_cidrs.push(net);
        }
        check_family_pair(&pod_cidrs, FIELD_POD_CIDRS)?;
        Ok(pod_cidrs)
    }

    /// The DNS domain, `cluster.local` when empty ([`NetworkSpec::validate`]).
    fn checked_dns_domain(&self) -> Result<String, ValidationError> {
        let dns_domain = if self.dns_domain.trim().is_empty() {
            DEFAULT_DNS_DOMAIN.to_owned()
        } else {
            self.dns_domain.trim().to_owned()
        };
        if !is_dns_subdomain(&dns_domain) {
            return Err(ValidationError::new(
                FIELD_DNS_DOMAIN,
                format!("{dns_domain:?} is not a DNS-1123 subdomain"),
            ));
        }
        Ok(dns_domain)
    }

    /// The DNS Service IPs, each inside a service CIDR and not reserved there; the 10th
    /// address of the primary service CIDR when none is given ([`NetworkSpec::validate`]).
    fn checked_dns_service_ips(
        &self,
        service_cidrs: &[IpNet],
    ) -> Result<Vec<IpAddr>, ValidationError> {
        let mut dns_service_ips = Vec::new();
        for (i, s) in self.dns_service_ips.iter().enumerate() {
            let field = format!("{FIELD_DNS_SERVICE_IPS}[{i}]");
            let ip: IpAddr = s
                .trim()
                .parse()
                .map_err(|_| ValidationError::new(&field, format!("{s:?} is not an IP address")))?;
            let Some(net) = service_cidrs.iter().find(|n| n.contains(&ip)) else {
                return Err(ValidationError::new(
                    field,
                    format!("{ip} is outside the service range {}", join(service_cidrs)),
                ));
            };
            if ip == net.network() || Some(ip) == nth_address(net, 1) {
                return Err(ValidationError::new(
                    field,
                    format!(
                        "{ip} is reserved in {net} (network address or the API server Service IP)"
                    ),
                ));
            }
            if let (IpAddr::V4(_), true) = (ip, ip == net.broadcast()) {
                return Err(ValidationError::new(
                    field,
                    format!("{ip} is the broadcast address of {net}"),
                ));
            }
            dns_service_ips.push(ip);
        }
        if dns_service_ips.is_empty()
            && let Some(ip) = service_cidrs.first().and_then(|n| nth_address(n, 10))
        {
            dns_service_ips.push(ip);
        }
        Ok(dns_service_ips)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(svc: &[&str], pods: &[&str], dns: &[&str]) -> NetworkSpec {
        NetworkSpec {
            service_cidrs: svc.iter().map(ToString::to_string).collect(),
            pod_cidrs: pods.iter().map(ToString::to_string).collect(),
            dns_domain: String::new(),
            dns_service_ips: dns.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn nth_addresses() {
        let n: IpNet = "10.96.0.0/12".parse().unwrap();
        assert_eq!(nth_address(&n, 1).unwrap().to_string(), "10.96.0.1");
        assert_eq!(nth_address(&n, 10).unwrap().to_string(), "10.96.0.10");
        let v6: IpNet = "fd00:10:96::/112".parse().unwrap();
        assert_eq!(nth_address(&v6, 10).unwrap().to_string(), "fd00:10:96::a");
        let tiny: IpNet = "10.0.0.0/30".parse().unwrap();
        assert_eq!(nth_address(&tiny, 3).unwrap().to_string(), "10.0.0.3");
        assert!(nth_address(&tiny, 4).is_none());
        let all: IpNet = "::/0".parse().unwrap();
        assert!(nth_address(&all, u128::MAX).is_some());
    }

    #[test]
    fn b18_defaults_follow_the_service_range() {
        let n = spec(&["10.100.0.0/16"], &["10.200.0.0/16"], &[])
            .validate()
            .unwrap();
        assert_eq!(n.dns_service_ips()[0].to_string(), "10.100.0.10");
        assert_eq!(n.api_server_service_ip().to_string(), "10.100.0.1");
        assert_eq!(n.dns_domain(), "cluster.local");
        assert_eq!(n.service_subnet(), "10.100.0.0/16");
        assert_eq!(n.pod_subnet(), "10.200.0.0/16");
    }

    #[test]
    fn b18_dns_ip_outside_service_range_is_rejected() {
        let e = spec(&["10.100.0.0/16"], &["10.200.0.0/16"], &["10.96.0.10"])
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "addons.coreDNS.dnsServiceIPs[0]");
        assert!(e.reason.contains("outside the service range"), "{e}");
    }

    #[test]
    fn b18_overlapping_pod_and_service_ranges_are_rejected() {
        let e = spec(&["10.100.0.0/16"], &["10.100.0.0/16"], &[])
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "clusterNetwork.pods.cidrBlocks[0]");
        let e = spec(&["10.96.0.0/12"], &["10.100.0.0/16"], &[])
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "clusterNetwork.pods.cidrBlocks[0]");
        assert!(e.reason.contains("overlaps"));
    }

    #[test]
    fn other_validation_errors_name_their_field() {
        let cases = [
            (spec(&[], &[], &[]), "clusterNetwork.services.cidrBlocks"),
            (
                spec(&["nope"], &[], &[]),
                "clusterNetwork.services.cidrBlocks[0]",
            ),
            (
                spec(&["10.96.0.1/12"], &[], &[]),
                "clusterNetwork.services.cidrBlocks[0]",
            ),
            (
                spec(&["10.0.0.0/8"], &[], &[]),
                "clusterNetwork.services.cidrBlocks[0]",
            ),
            (
                spec(&["10.0.0.0/29"], &[], &[]),
                "clusterNetwork.services.cidrBlocks[0]",
            ),
            (
                spec(&["10.96.0.0/12", "10.112.0.0/12"], &[], &[]),
                "clusterNetwork.services.cidrBlocks[1]",
            ),
            (
                spec(&["10.96.0.0/12"], &["x"], &[]),
                "clusterNetwork.pods.cidrBlocks[0]",
            ),
            (
                spec(&["10.96.0.0/12"], &[], &["10.96.0.1"]),
                "addons.coreDNS.dnsServiceIPs[0]",
            ),
            (
                spec(&["10.96.0.0/12"], &[], &["10.96.0.0"]),
                "addons.coreDNS.dnsServiceIPs[0]",
            ),
            (
                spec(&["10.96.0.0/12"], &[], &["bad"]),
                "addons.coreDNS.dnsServiceIPs[0]",
            ),
        ];
        for (s, field) in cases {
            assert_eq!(s.validate().unwrap_err().field, field, "{s:?}");
        }
        let mut s = spec(&["10.96.0.0/12"], &[], &[]);
        s.dns_domain = "Bad_Domain".into();
        assert_eq!(
            s.validate().unwrap_err().field,
            "clusterNetwork.serviceDomain"
        );
    }

    #[test]
    fn dual_stack_and_explicit_dns() {
        let n = spec(
            &["10.96.0.0/12", "fd00:10:96::/112"],
            &["10.244.0.0/16", "fd00:10:244::/56"],
            &["fd00:10:96::a", "10.96.0.53"],
        )
        .validate()
        .unwrap();
        assert_eq!(n.service_subnet(), "10.96.0.0/12,fd00:10:96::/112");
        assert_eq!(n.dns_service_ips().len(), 2);
        assert_eq!(n.dns_service_ips()[1].to_string(), "10.96.0.53");
    }
}
