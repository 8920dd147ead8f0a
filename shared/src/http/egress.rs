//! Where Core's calls to app origins may go. App origins come from the registry, which apps
//! write, so a call must not be aimable at the platform's own insides: the cloud's metadata
//! service, the database's network, a sidecar on loopback.
//!
//! Every address is judged after resolution, at connect time: the HTTP client resolves names
//! through [`GuardedResolver`] and connects only to the addresses it returns, so a name that
//! resolves to a public address when checked and to `127.0.0.1` when used (DNS rebinding) gets
//! nowhere. Literal addresses never reach a resolver and are judged by [`AppNetworks::check_url`].
//!
//! The rules, with IPv4-mapped, IPv4-compatible, NAT64 and 6to4 IPv6 forms judged as the IPv4
//! address they carry:
//! - loopback, link-local, unspecified, multicast, broadcast and reserved addresses: refused
//!   (local mode allows loopback, and private and shared addresses, a developer's own network);
//! - private (RFC 1918, IPv6 unique-local, the documentation and benchmarking ranges) and shared
//!   (RFC 6598) addresses: refused unless a range in `K2B_APP_NETWORKS` contains them or the host
//!   name is listed there;
//! - every other address: allowed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// The variable listing the networks app calls may reach besides the public internet:
/// comma-separated CIDR ranges (`10.20.0.0/16`, `fd00::/8`), addresses, host names
/// (`apps.internal`) and host-name suffixes (`*.svc.cluster.local`).
pub const APP_NETWORKS_VAR: &str = "K2B_APP_NETWORKS";

/// What kind of address an IP is, for the call rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    Public,
    Private,
    Shared,
    Loopback,
    LinkLocal,
    Unspecified,
    Multicast,
    Reserved,
}

impl AddressClass {
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Private => "private",
            AddressClass::Shared => "shared",
            AddressClass::Loopback => "loopback",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Multicast => "multicast",
            AddressClass::Reserved => "reserved",
        }
    }
}

/// The IPv4 address an IPv6 address stands for, when it carries one: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, not `::` or `::1`), NAT64
/// (`64:ff9b::a.b.c.d`) and 6to4 (`2002:aabb:ccdd::`).
fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let low = |a: u16, b: u16| Ipv4Addr::new((a >> 8) as u8, a as u8, (b >> 8) as u8, b as u8);
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return Some(low(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(low(s[1], s[2]));
    }
    None
}

fn in_v4(ip: Ipv4Addr, network: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(network)) & mask)
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let o = ip.octets();
    if o[0] == 0 {
        AddressClass::Unspecified
    } else if o[0] == 127 {
        AddressClass::Loopback
    } else if in_v4(ip, [169, 254, 0, 0], 16) {
        AddressClass::LinkLocal
    } else if in_v4(ip, [224, 0, 0, 0], 4) {
        AddressClass::Multicast
    } else if in_v4(ip, [240, 0, 0, 0], 4) {
        // Includes the limited broadcast address.
        AddressClass::Reserved
    } else if in_v4(ip, [10, 0, 0, 0], 8)
        || in_v4(ip, [172, 16, 0, 0], 12)
        || in_v4(ip, [192, 168, 0, 0], 16)
        || in_v4(ip, [192, 0, 0, 0], 24)
        || in_v4(ip, [198, 18, 0, 0], 15)
        // Documentation ranges: never on the internet, so someone's own network.
        || in_v4(ip, [192, 0, 2, 0], 24)
        || in_v4(ip, [198, 51, 100, 0], 24)
        || in_v4(ip, [203, 0, 113, 0], 24)
    {
        AddressClass::Private
    } else if in_v4(ip, [100, 64, 0, 0], 10) {
        AddressClass::Shared
    } else {
        AddressClass::Public
    }
}

/// The class of `ip` (an IPv6 address carrying an IPv4 one is judged as that IPv4 address).
pub fn classify(ip: IpAddr) -> AddressClass {
    let v6 = match ip {
        IpAddr::V4(v4) => return classify_v4(v4),
        IpAddr::V6(v6) => v6,
    };
    if let Some(v4) = embedded_ipv4(v6) {
        return classify_v4(v4);
    }
    let s = v6.segments();
    if v6.is_unspecified() {
        AddressClass::Unspecified
    } else if v6.is_loopback() {
        AddressClass::Loopback
    } else if s[0] & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if s[0] & 0xff00 == 0xff00 {
        AddressClass::Multicast
    } else if s[0] & 0xfe00 == 0xfc00
        || s[0] & 0xffc0 == 0xfec0
        || (s[0] == 0x2001 && s[1] == 0x0db8)
    {
        // Unique-local, the retired site-local range, and documentation.
        AddressClass::Private
    } else if s[0] & 0xe000 != 0x2000 {
        // Everything outside global unicast (2000::/3).
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

/// A CIDR range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `a.b.c.d/n`, `x::/n`, or a single address.
    pub fn parse(text: &str) -> Option<Cidr> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address.trim().parse().ok()?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().ok().filter(|p| *p <= max)?
            }
            Some(_) => return None,
            None => max,
        };
        Some(Cidr { network, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => in_v4(ip, net.octets(), u32::from(self.prefix)),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let prefix = u32::from(self.prefix);
                let mask = if prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - prefix)
                };
                (u128::from(ip) & mask) == (u128::from(net) & mask)
            }
            _ => false,
        }
    }
}

/// `ip` with an IPv4-mapped IPv6 address written as the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{host} is a {} address outside the networks app calls may reach", class.as_str())]
    Address { host: String, class: AddressClass },
    #[error("{host} resolves to no address app calls may reach")]
    Unresolvable { host: String },
    #[error("the URL has no host")]
    NoHost,
}

/// The networks Core's calls to apps may reach (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppNetworks {
    /// Local mode: loopback, private and shared addresses are the developer's own.
    allow_loopback: bool,
    networks: Vec<Cidr>,
    /// Lower-case host names; `*.suffix` entries are kept as `.suffix`.
    hosts: Vec<String>,
}

impl AppNetworks {
    /// The rules of local mode: loopback allowed, nothing else listed.
    pub fn local() -> AppNetworks {
        AppNetworks {
            allow_loopback: true,
            ..AppNetworks::default()
        }
    }

    /// Parses `K2B_APP_NETWORKS` (`None` or empty: nothing listed).
    pub fn parse(value: Option<&str>, allow_loopback: bool) -> Result<AppNetworks, String> {
        let mut networks = AppNetworks {
            allow_loopback,
            ..AppNetworks::default()
        };
        for entry in value.unwrap_or_default().split(',') {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            if let Some(cidr) = Cidr::parse(entry) {
                networks.networks.push(cidr);
                continue;
            }
            let (wildcard, name) = match entry.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, entry),
            };
            let valid_name = !name.is_empty()
                && name.len() <= 253
                && name.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                });
            if !valid_name || entry.contains('/') {
                return Err(format!(
                    "{APP_NETWORKS_VAR}: `{entry}` is neither a CIDR range, an address nor a host name"
                ));
            }
            let name = name.to_ascii_lowercase();
            networks
                .hosts
                .push(if wildcard { format!(".{name}") } else { name });
        }
        Ok(networks)
    }

    fn host_listed(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts
            .iter()
            .any(|listed| match listed.strip_prefix('.') {
                Some(suffix) => host.len() > suffix.len() && host.ends_with(listed.as_str()),
                None => *listed == host,
            })
    }

    /// Whether a call to `ip` (reached through the name `host`, if any) may go ahead.
    pub fn check(&self, host: Option<&str>, ip: IpAddr) -> Result<(), Refused> {
        let class = classify(ip);
        let allowed = match class {
            AddressClass::Public => true,
            AddressClass::Loopback => self.allow_loopback,
            AddressClass::Private | AddressClass::Shared => {
                self.allow_loopback
                    || self.networks.iter().any(|n| n.contains(ip))
                    || host.is_some_and(|h| self.host_listed(h))
            }
            AddressClass::LinkLocal
            | AddressClass::Unspecified
            | AddressClass::Multicast
            | AddressClass::Reserved => false,
        };
        if allowed {
            Ok(())
        } else {
            Err(Refused::Address {
                host: host.map_or_else(|| ip.to_string(), str::to_string),
                class,
            })
        }
    }

    /// The check a URL with a literal address needs before it is sent (names are checked when
    /// they resolve).
    pub fn check_url(&self, url: &url::Url) -> Result<(), Refused> {
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check(None, IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check(None, IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => Ok(()),
            None => Err(Refused::NoHost),
        }
    }

    /// The allowed addresses among `resolved` for `host`, or why there are none.
    pub fn filter(
        &self,
        host: &str,
        resolved: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, Refused> {
        let mut allowed = Vec::new();
        let mut refusal = None;
        for address in resolved {
            match self.check(Some(host), address.ip()) {
                Ok(()) => allowed.push(address),
                Err(refused) => refusal = Some(refused),
            }
        }
        if allowed.is_empty() {
            return Err(refusal.unwrap_or_else(|| Refused::Unresolvable {
                host: host.to_string(),
            }));
        }
        Ok(allowed)
    }
}

/// A resolver that hands the HTTP client only the addresses [`AppNetworks`] allows.
pub struct GuardedResolver {
    networks: Arc<AppNetworks>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let networks = self.networks.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let resolved = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let allowed = networks.filter(&host, resolved)?;
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A client builder for calls to app origins: names resolve through [`GuardedResolver`] and no
/// proxy from the environment is used (a proxy would resolve the name itself).
pub fn client_builder(networks: Arc<AppNetworks>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver { networks }))
        .no_proxy()
}

/// Whether a client error is a refusal by [`GuardedResolver`].
pub fn is_refusal(error: &(dyn std::error::Error + 'static)) -> Option<Refused> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(refused) = error.downcast_ref::<Refused>() {
            return Some(refused.clone());
        }
        current = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn addresses_are_classified_with_their_ipv4_forms() {
        for (address, class) in [
            ("8.8.8.8", AddressClass::Public),
            ("127.0.0.1", AddressClass::Loopback),
            ("127.255.0.9", AddressClass::Loopback),
            ("0.0.0.0", AddressClass::Unspecified),
            ("169.254.169.254", AddressClass::LinkLocal),
            ("224.0.0.1", AddressClass::Multicast),
            ("255.255.255.255", AddressClass::Reserved),
            ("10.1.2.3", AddressClass::Private),
            ("172.16.0.1", AddressClass::Private),
            ("172.32.0.1", AddressClass::Public),
            ("192.168.1.1", AddressClass::Private),
            ("100.64.0.1", AddressClass::Shared),
            ("100.128.0.1", AddressClass::Public),
            ("::1", AddressClass::Loopback),
            ("::", AddressClass::Unspecified),
            ("fe80::1", AddressClass::LinkLocal),
            ("ff02::1", AddressClass::Multicast),
            ("fd12:3456::1", AddressClass::Private),
            ("2001:db8::1", AddressClass::Private),
            ("192.0.2.7", AddressClass::Private),
            ("240.0.0.1", AddressClass::Reserved),
            ("2606:4700::1111", AddressClass::Public),
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("::ffff:169.254.169.254", AddressClass::LinkLocal),
            ("::ffff:10.0.0.1", AddressClass::Private),
            ("::127.0.0.1", AddressClass::Loopback),
            ("64:ff9b::a9fe:a9fe", AddressClass::LinkLocal),
            ("2002:7f00:1::", AddressClass::Loopback),
            ("2002:0808:0808::", AddressClass::Public),
        ] {
            assert_eq!(classify(ip(address)), class, "{address}");
        }
    }

    #[test]
    fn production_refuses_inward_addresses_unless_listed() {
        let networks = AppNetworks::parse(Some(" 10.20.0.0/16, apps.internal ,*.svc.local"), false)
            .expect("parse");
        assert!(networks.check(None, ip("93.184.216.34")).is_ok());
        assert!(networks.check(None, ip("127.0.0.1")).is_err());
        assert!(networks.check(None, ip("::ffff:127.0.0.1")).is_err());
        assert!(networks.check(None, ip("169.254.169.254")).is_err());
        assert!(networks.check(None, ip("10.20.3.4")).is_ok());
        assert!(networks.check(None, ip("::ffff:10.20.3.4")).is_ok());
        assert!(networks.check(None, ip("10.21.0.1")).is_err());
        assert!(
            networks
                .check(Some("apps.internal"), ip("10.99.0.1"))
                .is_ok()
        );
        assert!(
            networks
                .check(Some("APPS.internal."), ip("10.99.0.1"))
                .is_ok()
        );
        assert!(
            networks
                .check(Some("x.svc.local"), ip("100.64.0.1"))
                .is_ok()
        );
        assert!(networks.check(Some("svc.local"), ip("100.64.0.1")).is_err());
        assert!(networks.check(Some("other"), ip("10.99.0.1")).is_err());
        // A listed name never opens loopback or link-local.
        assert!(
            networks
                .check(Some("apps.internal"), ip("127.0.0.1"))
                .is_err()
        );
        assert!(
            networks
                .check(Some("apps.internal"), ip("169.254.169.254"))
                .is_err()
        );
        let local = AppNetworks::local();
        assert!(local.check(None, ip("127.0.0.1")).is_ok());
        assert!(local.check(None, ip("::1")).is_ok());
        assert!(local.check(None, ip("10.0.0.1")).is_ok());
        assert!(local.check(None, ip("169.254.169.254")).is_err());
        assert!(local.check(None, ip("0.0.0.0")).is_err());
    }

    #[test]
    fn the_variable_is_parsed_strictly() {
        for bad in ["10.0.0.0/33", "10.0.0.0/", "a b", "http://x", "x/8", "*."] {
            assert!(AppNetworks::parse(Some(bad), false).is_err(), "{bad}");
        }
        assert_eq!(
            AppNetworks::parse(Some(""), false).expect("empty"),
            AppNetworks::default()
        );
        let c = Cidr::parse("fd00::/8").expect("v6");
        assert!(c.contains(ip("fd12::1")));
        assert!(!c.contains(ip("fe80::1")));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .expect("all")
                .contains(ip("1.2.3.4"))
        );
    }

    #[test]
    fn resolved_addresses_are_filtered_and_literals_checked() {
        let networks = AppNetworks::default();
        let public: SocketAddr = "93.184.216.34:0".parse().expect("addr");
        let inner: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        assert_eq!(
            networks.filter("app.example", [inner, public]),
            Ok(vec![public])
        );
        assert!(matches!(
            networks.filter("app.example", [inner]),
            Err(Refused::Address {
                class: AddressClass::Loopback,
                ..
            })
        ));
        for url in [
            "http://127.0.0.1:8080/x",
            "http://[::ffff:7f00:1]/",
            "http://[::1]/",
            "http://169.254.169.254/latest",
            "http://0.0.0.0/",
        ] {
            let url = url::Url::parse(url).expect("url");
            assert!(networks.check_url(&url).is_err(), "{url}");
        }
        let url = url::Url::parse("http://app.example/").expect("url");
        assert!(networks.check_url(&url).is_ok());
    }
}
