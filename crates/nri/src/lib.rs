//! The plugin side of containerd's Node Resource Interface (NRI), as much
//! as the node agent needs to follow pod sandboxes: exclusive netdev mode
//! moves a NIC's netdev into a pod's network namespace, which exists only
//! once the sandbox runs, long after the kubelet prepared the claim.
//!
//! - [`mux`]: NRI's two connections over one unix socket;
//! - [`ttrpc`]: unary ttrpc on each of them;
//! - [`api`]: the plugin API's messages (`proto/nri.proto`);
//! - [`plugin`]: registration, `Configure`/`Synchronize`, and the pod
//!   sandbox events routed to [`plugin::PodHooks`].
//!
//! No Rust NRI crate exists; the `ttrpc` crate is not used (see
//! [`ttrpc`]'s doc for why). The runtime side of the tests is upstream's
//! own (`testbed/nri-runtime`).

pub mod mux;
pub mod plugin;
pub mod ttrpc;

/// The NRI plugin API messages (package `nri.pkg.api.v1alpha1`),
/// generated from `proto/nri.proto`.
#[allow(missing_docs, clippy::all)]
pub mod api {
    include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
}

pub use plugin::{Identity, PluginError, PodHooks, network_namespace, run};
