//! The gRPC APIs between the kubelet and a node plugin, generated from this
//! crate's own `.proto` files (wire-identical to `k8s.io/kubelet/pkg/apis`).
//!
//! - [`dra::v1`], [`dra::v1beta1`]: the `DRAPlugin` service (prepare/unprepare).
//! - [`dra_health::v1`], [`dra_health::v1alpha1`]: the `DRAResourceHealth` stream.
//! - [`pluginregistration::v1`]: the plugin watcher's `Registration` service.
//! - [`deviceplugin::v1beta1`]: the classic device plugin API.
//! - [`uds`]: serving and dialling these services over unix sockets, with
//!   a pause after a failed accept ([`backoff`]);
//!   [`authority`]: why and how a socket path sent as `:authority` is served.
//!
//! Each versioned module also has the string a plugin lists in
//! `PluginInfo.supported_versions` to announce that it serves the service.
#![deny(missing_docs)]

pub mod authority;
pub mod backoff;
pub mod uds;

/// Dynamic Resource Allocation node service.
pub mod dra {
    /// `k8s.io.kubelet.pkg.apis.dra.v1`.
    #[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
    pub mod v1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");

        /// Listed in `supported_versions` by a plugin that serves this `DRAPlugin`.
        pub const SERVICE: &str = "v1.DRAPlugin";
    }

    /// `k8s.io.kubelet.pkg.apis.dra.v1beta1`.
    #[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
    pub mod v1beta1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");

        /// Listed in `supported_versions` by a plugin that serves this `DRAPlugin`.
        pub const SERVICE: &str = "v1beta1.DRAPlugin";
    }
}

/// Device health reporting of DRA drivers.
pub mod dra_health {
    /// Proto package `v1` (`k8s.io/kubelet/pkg/apis/dra-health/v1`), GA in 1.37.
    #[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
    pub mod v1 {
        tonic::include_proto!("v1");

        /// Listed in `supported_versions` by a plugin that serves `DRAResourceHealth`.
        pub const SERVICE: &str = "v1.DRAResourceHealth";
    }

    /// Proto package `v1alpha1` (`k8s.io/kubelet/pkg/apis/dra-health/v1alpha1`).
    #[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
    pub mod v1alpha1 {
        tonic::include_proto!("v1alpha1");

        /// Listed in `supported_versions` by a plugin that serves `DRAResourceHealth`.
        pub const SERVICE: &str = "v1alpha1.DRAResourceHealth";
    }
}

/// Kubelet plugin watcher registration.
pub mod pluginregistration {
    /// Proto package `pluginregistration` (`k8s.io/kubelet/pkg/apis/pluginregistration/v1`).
    #[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
    pub mod v1 {
        tonic::include_proto!("pluginregistration");

        /// `PluginInfo.type` of a DRA driver.
        pub const DRA_PLUGIN_TYPE: &str = "DRAPlugin";
    }
}

/// Classic count-based device plugins.
pub mod deviceplugin {
    /// Proto package `v1beta1` (`k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1`).
    #[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
    pub mod v1beta1 {
        tonic::include_proto!("v1beta1");

        /// `RegisterRequest.version` of this API.
        pub const VERSION: &str = "v1beta1";
        /// Socket file name of the kubelet's `Registration` service in the device plugin dir.
        pub const KUBELET_SOCKET: &str = "kubelet.sock";
        /// `Device.health` of a usable device.
        pub const HEALTHY: &str = "Healthy";
        /// `Device.health` of an unusable device.
        pub const UNHEALTHY: &str = "Unhealthy";
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use tonic::server::NamedService;

    use super::*;

    #[test]
    fn claim_encodes_with_upstream_field_numbers() {
        let claim = dra::v1::Claim {
            namespace: "a".into(),
            uid: "b".into(),
            name: "c".into(),
        };
        // Field 1 namespace, 2 uid, 3 name, all length-delimited.
        assert_eq!(claim.encode_to_vec(), b"\x0a\x01a\x12\x01b\x1a\x01c");
    }

    #[test]
    fn v1_share_id_is_field_5_and_ignored_by_v1beta1() {
        let device = dra::v1::Device {
            request_names: vec!["nic".into()],
            pool_name: "node-a".into(),
            device_name: "pf-0c".into(),
            cdi_device_ids: vec!["amd.com/ainic=x".into()],
            share_id: Some("s1".into()),
        };
        let bytes = device.encode_to_vec();
        assert!(bytes.ends_with(b"\x2a\x02s1"));
        let old = dra::v1beta1::Device::decode(bytes.as_slice()).unwrap();
        assert_eq!(old.device_name, "pf-0c");
        assert_eq!(old.cdi_device_ids, device.cdi_device_ids);
    }

    #[test]
    fn grpc_service_names_match_upstream() {
        use deviceplugin::v1beta1::device_plugin_server::DevicePluginServer as Dp;
        use dra::v1::dra_plugin_server::DraPluginServer as V1;
        use dra::v1beta1::dra_plugin_server::DraPluginServer as V1beta1;
        use dra_health::v1alpha1::dra_resource_health_server::DraResourceHealthServer as Health;
        use pluginregistration::v1::registration_server::RegistrationServer as Reg;
        assert_eq!(
            <V1<()> as NamedService>::NAME,
            "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
        );
        assert_eq!(
            <V1beta1<()> as NamedService>::NAME,
            "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
        );
        assert_eq!(
            <Health<()> as NamedService>::NAME,
            "v1alpha1.DRAResourceHealth"
        );
        assert_eq!(
            <Reg<()> as NamedService>::NAME,
            "pluginregistration.Registration"
        );
        assert_eq!(<Dp<()> as NamedService>::NAME, "v1beta1.DevicePlugin");
    }
}
