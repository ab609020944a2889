//! How a runtime process is started and how it ends.

/// The StreamJob manifest, for `streamjob-runtime … env:STREAMJOB_MANIFEST`.
pub const MANIFEST_ENV: &str = "STREAMJOB_MANIFEST";
/// The per-job control token (control API bearer token, worker and data connections).
pub const TOKEN_ENV: &str = "STREAMJOB_CONTROL_TOKEN";
/// Where the runtime writes its termination message (Kubernetes' `terminationMessagePath`).
pub const TERMINATION_MESSAGE_PATH_ENV: &str = "STREAMJOB_TERMINATION_MESSAGE_PATH";

/// The coordinator's control API (HTTP + JSON).
pub const CONTROL_PORT: u16 = 8081;
/// The coordinator's Prometheus metrics (`GET /metrics`, no token: the numbers are not secret,
/// and Prometheus must scrape them without the job's control token). Flink's Prometheus reporter
/// port.
pub const METRICS_PORT: u16 = 9249;
/// The coordinator's worker registry.
pub const CLUSTER_PORT: u16 = 6123;
/// A worker's data port (channels between subtasks on different workers).
pub const DATA_PORT: u16 = 6121;

/// The listen address for `0.0.0.0:PORT` in a pod whose IP is `pod_ip` (its `POD_IP`): every
/// interface of the pod, `[::]` on an IPv6 pod. Our processes listen on every interface, not on
/// their pod IP only, because `kubectl port-forward` connects to the pod's loopback. Other
/// addresses are kept as given.
pub fn listen_in_pod(addr: std::net::SocketAddr, pod_ip: Option<&str>) -> std::net::SocketAddr {
    let v6_pod = pod_ip
        .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
        .is_some_and(|ip| ip.is_ipv6());
    if v6_pod && addr.ip() == std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED) {
        std::net::SocketAddr::new(
            std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            addr.port(),
        )
    } else {
        addr
    }
}

/// Exit codes of `streamjob-runtime` that mean something to the operator.
pub mod exit {
    /// Done (a finished bounded job, a plan that is compatible, a disposal).
    pub const OK: u8 = 0;
    /// A failure worth retrying (a store that failed, a signal, a crash).
    pub const FAILED: u8 = 1;
    /// The manifest cannot run at all (invalid, unsupported, a restore that would rewind):
    /// retrying the same spec cannot help.
    pub const INVALID: u8 = 2;
    /// `plan`: the new job cannot restore the state (the report names the uids).
    pub const INCOMPATIBLE: u8 = 3;
    /// The run was fenced: a newer epoch took over; it committed nothing more.
    pub const SUPERSEDED: u8 = 4;
    /// Stopped by SIGTERM (128 + 15) after stopping cleanly.
    pub const SIGNALLED: u8 = 143;
}

#[cfg(test)]
mod tests {
    use super::listen_in_pod;

    #[test]
    fn every_interface_of_the_pod_in_its_family() {
        let any = "0.0.0.0:8081".parse().unwrap();
        assert_eq!(
            listen_in_pod(any, Some("10.0.0.7")).to_string(),
            "0.0.0.0:8081"
        );
        assert_eq!(listen_in_pod(any, None).to_string(), "0.0.0.0:8081");
        assert_eq!(listen_in_pod(any, Some("fd00::7")).to_string(), "[::]:8081");
        let own = "10.0.0.7:8081".parse().unwrap();
        assert_eq!(listen_in_pod(own, Some("fd00::7")), own);
    }
}
