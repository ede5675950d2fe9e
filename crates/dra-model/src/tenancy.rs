//! Sticky tenant binding of shared PFs (use case 4, "not tenant Y's
//! devices" for PFs no one assigned): a shared PF that the fabric config
//! gives no tenant is bound to the first tenant whose claim takes a share
//! of it, and no other tenant can share it until the last share is gone.
//!
//! Race-free by the scheduler's binding conditions (KEP-5007): the agent
//! publishes such a PF with the binding condition `<driver>/tenant-bound`
//! and the failure condition `<driver>/tenant-conflict`, and the scheduler
//! binds no pod whose claim holds a share until the controller set one of
//! them on the claim's `status.devices` entry. The controller, one leader
//! deciding claim after claim from a fresh list, sets `tenant-bound` only
//! when no claim of another tenant holds the PF; otherwise
//! `tenant-conflict`, which makes the scheduler give the share back and try
//! again. So two tenants' pods never run on one PF, however their claims
//! were allocated.
//!
//! So that the retry goes elsewhere, the binding is also a node label,
//! `<driver>/bound-tenant.<device>` = tenant, which the agent publishes as
//! the PF's `tenant` attribute: the PF leaves the shared class `ainic-shared`
//! for `ainic-shared-<tenant>`. The label goes when no claim holds the PF.
//!
//! A claim's tenant is its namespace's tenant label ([`tenant_identity`]),
//! or else the namespace itself under a name no label can give
//! (`ns.<namespace>`). This module decides; the controller reads and
//! writes.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim};

use crate::names::{self, CONDITION_TENANT_BOUND, CONDITION_TENANT_CONFLICT};

/// A sticky PF: its pool (the node's name) and device name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StickyPf {
    /// Pool, which for the agent's pools is the node name.
    pub pool: String,
    /// Device name.
    pub device: String,
}

/// One sticky share a claim holds, as `status.devices` keys it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Share {
    /// The PF.
    pub pf: StickyPf,
    /// The allocation's share ID.
    pub share_id: Option<String>,
}

/// What the controller answers for one share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `tenant-bound` = True: the PF is (now) the claim's tenant's.
    Bound,
    /// `tenant-conflict` = True, with why.
    Conflict(String),
}

/// Conditions to set on one claim's shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimAnswer {
    /// Namespace of the claim.
    pub namespace: String,
    /// Name of the claim.
    pub name: String,
    /// UID of the claim (the write must not reach a recreated claim).
    pub uid: String,
    /// Every share of the claim the controller answers, with the answer.
    pub shares: Vec<(Share, Answer)>,
}

/// A node label to set (`Some`) or remove (`None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelChange {
    /// The node.
    pub node: String,
    /// Full label key.
    pub key: String,
    /// New value, or `None` to remove it.
    pub value: Option<String>,
}

/// What one pass must write: labels first, then the claims' conditions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantWrites {
    /// Binding labels to set or remove.
    pub labels: Vec<LabelChange>,
    /// Claims with newly decided shares.
    pub claims: Vec<ClaimAnswer>,
    /// PFs already held by claims of more than one tenant (a binding made
    /// before this controller, or by hand); logged.
    pub violations: Vec<String>,
}

/// The tenant of a claim in `namespace` whose tenant label is `label`: the
/// label when it is a DNS label (what tenant names are), else the
/// namespace as a tenant of its own, `ns.<namespace>` — a name with a dot,
/// which no tenant name has, so an unlabelled namespace called like a
/// tenant is not that tenant. Kept to 63 characters (a label value) by
/// hashing long namespace names.
pub fn tenant_identity(namespace: &str, label: Option<&str>) -> String {
    if let Some(tenant) = label.filter(|t| crate::validate::format::is_dns_label(t)) {
        return tenant.to_string();
    }
    let own = format!("ns.{namespace}");
    if own.len() <= 63 {
        return own;
    }
    let hash = namespace.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("ns.{}-{:08x}", &namespace[..50], hash as u32)
}

/// The label key of `device`'s binding.
pub fn bound_label(driver: &str, device: &str) -> String {
    names::qualified(
        driver,
        &format!("{}{device}", names::LABEL_BOUND_TENANT_PREFIX),
    )
}

/// The state of one share in the claim's status.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Pending,
    Bound,
    /// With the condition's message.
    Conflict(String),
}

/// The sticky shares of `claim` with their state.
fn sticky_shares(claim: &ResourceClaim, driver: &str) -> Vec<(Share, State)> {
    let bound = names::qualified(driver, CONDITION_TENANT_BOUND);
    let conflict = names::qualified(driver, CONDITION_TENANT_CONFLICT);
    let status = claim.status.as_ref();
    let results = crate::claim::allocation_results(claim);
    let is_sticky = |r: &&DeviceRequestAllocationResult| {
        r.driver == driver
            && r.binding_conditions
                .as_ref()
                .is_some_and(|c| c.contains(&bound))
    };
    results
        .iter()
        .filter(is_sticky)
        .map(|r| {
            let entry = (status
                .and_then(|s| s.devices.as_deref())
                .unwrap_or_default())
            .iter()
            .find(|d| {
                d.driver == r.driver
                    && d.pool == r.pool
                    && d.device == r.device
                    && d.share_id == r.share_id
            });
            // The message of the condition `kind` when it is true.
            let true_condition = |kind: &str| {
                (entry
                    .and_then(|e| e.conditions.as_deref())
                    .unwrap_or_default())
                .iter()
                .find(|c| c.type_ == kind && c.status == "True")
                .map(|c| c.message.clone())
            };
            let state = if true_condition(&bound).is_some() {
                State::Bound
            } else if let Some(message) = true_condition(&conflict) {
                State::Conflict(message)
            } else {
                State::Pending
            };
            let pf = StickyPf {
                pool: r.pool.clone(),
                device: r.device.clone(),
            };
            (
                Share {
                    pf,
                    share_id: r.share_id.clone(),
                },
                state,
            )
        })
        .collect()
}

/// The PFs of `driver` that `claim` holds shares of without binding
/// conditions.
fn unconditioned<'c>(
    claim: &'c ResourceClaim,
    driver: &'c str,
) -> impl Iterator<Item = StickyPf> + 'c {
    (crate::claim::allocation_results(claim).iter())
        .filter(move |r| {
            r.driver == driver && r.binding_conditions.as_ref().is_none_or(|c| c.is_empty())
        })
        .map(|r| StickyPf {
            pool: r.pool.clone(),
            device: r.device.clone(),
        })
}

/// What `claim`'s status answers now for each of its sticky shares
/// (`None`: not yet): what the controller checks right before it writes,
/// so that an answer is never turned into another.
pub fn answered(claim: &ResourceClaim, driver: &str) -> Vec<(Share, Option<Answer>)> {
    (sticky_shares(claim, driver).into_iter())
        .map(|(share, state)| {
            let answer = match state {
                State::Pending => None,
                State::Bound => Some(Answer::Bound),
                State::Conflict(why) => Some(Answer::Conflict(why)),
            };
            (share, answer)
        })
        .collect()
}

/// The bindings the nodes' labels record, by PF.
fn labelled(
    nodes: &BTreeMap<String, BTreeMap<String, String>>,
    driver: &str,
) -> BTreeMap<StickyPf, String> {
    let prefix = bound_label(driver, "");
    let mut out = BTreeMap::new();
    for (node, labels) in nodes {
        for (key, tenant) in labels {
            if let Some(device) = key.strip_prefix(&prefix) {
                let pf = StickyPf {
                    pool: node.clone(),
                    device: device.to_string(),
                };
                out.insert(pf, tenant.clone());
            }
        }
    }
    out
}

/// Whether there is anything to decide: a claim holding a sticky share,
/// or a binding label. Without, the controller need not read namespaces
/// (nor be allowed to).
pub fn in_use(
    claims: &[ResourceClaim],
    nodes: &BTreeMap<String, BTreeMap<String, String>>,
    driver: &str,
) -> bool {
    !labelled(nodes, driver).is_empty()
        || claims.iter().any(|c| !sticky_shares(c, driver).is_empty())
}

/// Decides one pass: `claims` as listed now, each node's labels, and the
/// tenant of each namespace.
pub fn plan(
    claims: &[ResourceClaim],
    nodes: &BTreeMap<String, BTreeMap<String, String>>,
    tenant_of: &dyn Fn(&str) -> String,
    driver: &str,
) -> TenantWrites {
    let mut out = TenantWrites::default();
    let labels = labelled(nodes, driver);
    let mut holders: BTreeMap<StickyPf, BTreeSet<String>> = BTreeMap::new();
    let mut pending = Vec::new();
    for claim in claims {
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        let tenant = tenant_of(&namespace);
        let shares = sticky_shares(claim, driver);
        for (share, state) in &shares {
            if *state == State::Bound {
                holders
                    .entry(share.pf.clone())
                    .or_default()
                    .insert(tenant.clone());
            }
        }
        if shares.iter().any(|(_, s)| *s == State::Pending) {
            pending.push((claim, tenant, shares));
        }
    }
    // Shares allocated without binding conditions (before the agent
    // published them: the gate turned on by an upgrade, --sticky-tenants
    // turned on, a configured tenant removed) hold a sticky PF too.
    let sticky: BTreeSet<StickyPf> = (holders.keys().cloned())
        .chain(labels.keys().cloned())
        .chain(
            pending
                .iter()
                .flat_map(|(_, _, shares)| shares.iter().map(|(s, _)| s.pf.clone())),
        )
        .collect();
    for claim in claims {
        let tenant = tenant_of(claim.metadata.namespace.as_deref().unwrap_or_default());
        for pf in unconditioned(claim, driver).filter(|pf| sticky.contains(pf)) {
            holders.entry(pf).or_default().insert(tenant.clone());
        }
    }
    for (pf, tenants) in &holders {
        if tenants.len() > 1 {
            out.violations.push(format!(
                "PF {} of node {} is held by claims of tenants {tenants:?}",
                pf.device, pf.pool
            ));
        }
    }
    let mut binding: BTreeMap<StickyPf, String> = labels.clone();
    for (pf, tenants) in &holders {
        if let Some(first) = tenants.iter().next() {
            binding.insert(pf.clone(), first.clone());
        }
    }
    // First allocated, first bound.
    pending.sort_by_key(|(claim, _, _)| {
        let at = (claim.status.as_ref())
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.allocation_timestamp.as_ref())
            .map(|t| t.0);
        (
            at,
            claim.metadata.namespace.clone(),
            claim.metadata.name.clone(),
        )
    });
    for (claim, tenant, shares) in pending {
        let answers = answer(&shares, &tenant, &mut binding, &mut holders);
        out.claims.push(ClaimAnswer {
            namespace: claim.metadata.namespace.clone().unwrap_or_default(),
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            shares: answers,
        });
    }
    out.labels = label_changes(&labels, &binding, &holders, driver);
    out
}

/// The answers for one claim with pending shares: the shares answered
/// before, as they were (one write states all the controller owns), and
/// then the pending ones: all bound when no other tenant holds any of their
/// PFs and none was refused before, else a conflict for each that another
/// tenant holds (the rest stay pending: the scheduler gives the whole claim
/// back).
fn answer(
    shares: &[(Share, State)],
    tenant: &str,
    binding: &mut BTreeMap<StickyPf, String>,
    holders: &mut BTreeMap<StickyPf, BTreeSet<String>>,
) -> Vec<(Share, Answer)> {
    let mut out: Vec<(Share, Answer)> = (shares.iter())
        .filter_map(|(share, state)| match state {
            State::Pending => None,
            State::Bound => Some((share.clone(), Answer::Bound)),
            State::Conflict(why) => Some((share.clone(), Answer::Conflict(why.clone()))),
        })
        .collect();
    let pending = shares.iter().filter(|(_, s)| *s == State::Pending);
    let conflicts: Vec<(Share, Answer)> = pending
        .clone()
        .filter_map(|(share, _)| {
            let other = binding.get(&share.pf).filter(|t| *t != tenant)?;
            let why = format!(
                "shared PF {} of node {} is bound to tenant {other} until its last share is released; tenant {tenant} cannot share it",
                share.pf.device, share.pf.pool
            );
            Some((share.clone(), Answer::Conflict(why)))
        })
        .collect();
    let refused_before = out.iter().any(|(_, a)| matches!(a, Answer::Conflict(_)));
    if refused_before || !conflicts.is_empty() {
        out.extend(conflicts);
        return out;
    }
    out.extend(pending.map(|(share, _)| {
        binding.insert(share.pf.clone(), tenant.to_string());
        let held = holders.entry(share.pf.clone()).or_default();
        held.insert(tenant.to_string());
        (share.clone(), Answer::Bound)
    }));
    out
}

/// Labels to write so that they say `binding` for every held PF and
/// nothing for the others.
fn label_changes(
    labels: &BTreeMap<StickyPf, String>,
    binding: &BTreeMap<StickyPf, String>,
    holders: &BTreeMap<StickyPf, BTreeSet<String>>,
    driver: &str,
) -> Vec<LabelChange> {
    let mut out = Vec::new();
    for pf in holders.keys() {
        let want = binding.get(pf);
        if labels.get(pf) != want {
            out.push(LabelChange {
                node: pf.pool.clone(),
                key: bound_label(driver, &pf.device),
                value: want.cloned(),
            });
        }
    }
    for pf in labels.keys().filter(|pf| !holders.contains_key(*pf)) {
        out.push(LabelChange {
            node: pf.pool.clone(),
            key: bound_label(driver, &pf.device),
            value: None,
        });
    }
    out
}

#[cfg(test)]
mod tests;
