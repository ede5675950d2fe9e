//! End-to-end tests on the testbed: real kube-apiserver, kube-scheduler and
//! kube-controller-manager built from their pinned Go modules
//! (`testbed/build`, `scripts/testbed`), the chart installed by the real
//! helm, real `ainic-dra node` agents publishing for fake Nodes with the
//! chart's service account and RBAC. The real components judge: the API
//! server validates and admits, the scheduler allocates, and `simulate`
//! must agree with it. See docs/testing.md.
//!
//! All tests of this binary share one control plane per Kubernetes
//! release, started on first use; each test keeps to its own node names
//! and namespace.

mod admission;
mod chart;
mod claim_status;
mod extended;
mod fabric;
mod fencing;
mod leader;
mod nicconfig;
#[path = "../nicconfig_cases/mod.rs"]
mod nicconfig_cases;
mod ownership;
mod publish;
mod schedule;
mod sticky;
mod support;
mod tenants;
mod trust;
mod why;
