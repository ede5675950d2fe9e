//! Device capacities: link bandwidth and queue pairs, with request
//! policies on shared PFs.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, DeviceCapacity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use topology::NicFunction;

/// `value` as a canonical decimal-SI quantity: `400000000000` → `400G`.
fn decimal(value: u64) -> Quantity {
    Quantity(k8s_quantity::Quantity::from_u64(value).to_decimal_si())
}

use crate::config::ModelConfig;
use crate::names::{self, capacity};

/// Link bandwidth of `nic` in bits/s: the netdev speed, else the RDMA port
/// rate, else that of `pf` (its parent, for a VF). `None` when nothing says.
pub fn bandwidth_bps(nic: &NicFunction, pf: Option<&NicFunction>) -> Option<u64> {
    let from_netdev = nic
        .netdevs
        .iter()
        .find_map(|n| n.speed_mbps)
        .map(|m| m * 1_000_000);
    let from_rdma = || {
        nic.rdma
            .iter()
            .flat_map(|r| &r.ports)
            .find_map(|p| p.rate.as_deref().and_then(rate_bps))
    };
    from_netdev
        .or_else(from_rdma)
        .or_else(|| pf.and_then(|pf| bandwidth_bps(pf, None)))
}

/// `400 Gb/sec (4X NDR)` → 400·10⁹; `2.5 Gb/sec` → 2.5·10⁹.
fn rate_bps(rate: &str) -> Option<u64> {
    let (number, rest) = rate.trim().split_once(' ')?;
    if !rest.starts_with("Gb/sec") {
        return None;
    }
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if frac.len() > 9 {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let frac_val: u64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    whole.checked_mul(1_000_000_000)?.checked_add(frac_val)
}

/// The capacities of `nic` (`pf`: its parent, for a VF); with `shared`,
/// request policies so that a claim can take a share (default and minimum
/// from the configuration, never above the capacity).
pub fn capacities(
    nic: &NicFunction,
    pf: Option<&NicFunction>,
    config: &ModelConfig,
    shared: bool,
) -> BTreeMap<String, DeviceCapacity> {
    let opts = config.options();
    let mut out = BTreeMap::new();
    let mut put = |id: &str, value: u64, min_share: u64| {
        let policy = shared.then(|| share_policy(value, min_share));
        out.insert(
            names::qualified(config.driver(), id),
            DeviceCapacity {
                value: decimal(value),
                request_policy: policy,
            },
        );
    };
    if let Some(bw) = bandwidth_bps(nic, pf) {
        put(capacity::BANDWIDTH, bw, opts.shared_min_bandwidth);
    }
    let qps = if nic.is_pf() {
        opts.pf_queue_pairs
    } else {
        opts.vf_queue_pairs
    };
    if let Some(qps) = qps {
        put(capacity::QUEUE_PAIRS, qps, opts.shared_min_queue_pairs);
    }
    out
}

/// Any amount from `min_share` up to the whole; `min_share` by default.
fn share_policy(total: u64, min_share: u64) -> CapacityRequestPolicy {
    let min = decimal(min_share.min(total));
    CapacityRequestPolicy {
        default: Some(min.clone()),
        valid_range: Some(CapacityRequestPolicyRange {
            min,
            max: Some(decimal(total)),
            step: None,
        }),
        valid_values: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rdma_rates() {
        assert_eq!(rate_bps("400 Gb/sec (4X NDR)"), Some(400_000_000_000));
        assert_eq!(rate_bps("2.5 Gb/sec (1X SDR)"), Some(2_500_000_000));
        assert_eq!(rate_bps("invalid"), None);
        assert_eq!(rate_bps("10 Mb/sec"), None);
    }

    #[test]
    fn bandwidth_falls_back_to_rdma_rate_then_pf() {
        let inv = crate::sample::inventory(1, 1);
        let mut pf = inv.nics[0].clone();
        assert_eq!(bandwidth_bps(&pf, None), Some(400_000_000_000));
        pf.netdevs[0].speed_mbps = None;
        let from_rate = bandwidth_bps(&pf, None);
        assert_eq!(from_rate, Some(400_000_000_000), "from the RDMA port rate");
        let vf = &inv.nics[1];
        assert!(vf.netdevs.is_empty() && vf.rdma.is_empty());
        assert_eq!(bandwidth_bps(vf, None), None);
        assert_eq!(
            bandwidth_bps(vf, Some(&pf)),
            Some(400_000_000_000),
            "from its PF"
        );
    }
}
