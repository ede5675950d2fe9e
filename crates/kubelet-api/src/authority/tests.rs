//! Over a real unix socket with tonic on both ends: the client sends what
//! grpc-go sends for a bare socket path.

use std::path::Path;

use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::grpc_go_authority;
use crate::pluginregistration::v1 as reg;
use reg::registration_client::RegistrationClient;
use reg::registration_server::{Registration, RegistrationServer};

/// A registration service with a fixed answer.
pub(crate) struct Fixed;

#[tonic::async_trait]
impl Registration for Fixed {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: reg::DRA_PLUGIN_TYPE.into(),
            name: "example.com".into(),
            endpoint: "/x/dra.sock".into(),
            supported_versions: vec!["v1.DRAPlugin".into()],
        }))
    }
    async fn notify_registration_status(
        &self,
        _: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

async fn dial_like_the_plugin_manager(path: &Path) -> Channel {
    crate::uds::connect_sending_path(path).await.unwrap()
}

async fn get_info(channel: Channel) -> Result<reg::PluginInfo, Status> {
    let mut client = RegistrationClient::new(channel);
    let info = client.get_info(reg::InfoRequest {}).await?.into_inner();
    client
        .notify_registration_status(reg::RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        })
        .await?;
    Ok(info)
}

#[test]
fn grpc_go_encodes_a_socket_path_as_the_kubelet_sends_it() {
    assert_eq!(
        grpc_go_authority("/var/lib/kubelet/plugins_registry/ainic.amd.com-reg.sock"),
        "%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fainic.amd.com-reg.sock"
    );
    assert_eq!(grpc_go_authority("a b:1@[x]~"), "a%20b:1@[x]~");
}

#[tokio::test]
async fn a_server_on_bind_answers_a_client_that_sends_the_socket_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plugins_registry/example.com-reg.sock");
    let incoming = crate::uds::bind(&path).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(Fixed))
            .serve_with_incoming(incoming),
    );
    let info = get_info(dial_like_the_plugin_manager(&path).await)
        .await
        .expect("GetInfo and NotifyRegistrationStatus with a path authority");
    assert_eq!(info.endpoint, "/x/dra.sock");
}

/// Why `bind` wraps connections: tonic on a bare socket refuses the
/// kubelet's request. If this starts to pass, h2 accepts such an authority
/// by itself and `ServerConn` can go.
#[tokio::test]
async fn without_the_rewrite_tonic_refuses_a_socket_path_authority() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bare.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(Fixed))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    let err = get_info(dial_like_the_plugin_manager(&path).await)
        .await
        .expect_err("h2 resets a stream whose :authority is a path");
    assert!(
        format!("{err:?}").to_lowercase().contains("protocol"),
        "expected a protocol error, got {err:?}"
    );
}
