use std::sync::{Arc, Mutex};

use kubelet_api::pluginregistration::v1::registration_server::{Registration, RegistrationServer};
use tonic::{Request, Response, Status};

use super::*;

/// A plugin that announces `info` and records what the kubelet told it.
struct Announcer {
    info: reg::PluginInfo,
    told: Arc<Mutex<Option<reg::RegistrationStatus>>>,
}

#[tonic::async_trait]
impl Registration for Announcer {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }
    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        *self.told.lock().unwrap() = Some(request.into_inner());
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

async fn serve(
    dir: &Path,
    info: reg::PluginInfo,
) -> (PathBuf, Arc<Mutex<Option<reg::RegistrationStatus>>>) {
    let socket = dir.join("x-reg.sock");
    let told = Arc::default();
    let incoming = kubelet_api::uds::bind(&socket).unwrap();
    let service = Announcer {
        info,
        told: Arc::clone(&told),
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(service))
            .serve_with_incoming(incoming),
    );
    (socket, told)
}

#[tokio::test]
async fn a_plugin_of_the_wrong_type_is_told_it_was_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let info = reg::PluginInfo {
        r#type: "CSIPlugin".into(),
        name: "x".into(),
        endpoint: dir.path().join("dra.sock").display().to_string(),
        supported_versions: vec![v1::SERVICE.into()],
    };
    let (socket, told) = serve(dir.path(), info).await;
    let err = KubeletSim::register(&socket).await.err().expect("rejected");
    assert!(err.to_string().contains("CSIPlugin"), "{err}");
    let status = told.lock().unwrap().clone().unwrap();
    assert!(!status.plugin_registered);
    assert!(status.error.contains("CSIPlugin"));
}

#[tokio::test]
async fn a_plugin_without_a_dra_version_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let info = reg::PluginInfo {
        r#type: "DRAPlugin".into(),
        name: "x".into(),
        endpoint: dir.path().join("dra.sock").display().to_string(),
        supported_versions: vec!["v1alpha3.DRAPlugin".into()],
    };
    let (socket, told) = serve(dir.path(), info).await;
    assert!(KubeletSim::register(&socket).await.is_err());
    assert!(!told.lock().unwrap().clone().unwrap().plugin_registered);
}
