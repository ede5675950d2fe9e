//! Prepare of one claim: answered from the checkpoint when it is there,
//! else planned from the claim, written (CDI spec, then checkpoint) and
//! answered; with device metadata, its files too.

use std::sync::Arc;

use super::*;

impl Driver {
    pub(super) async fn prepare_one(
        &self,
        claim: &ClaimRef,
    ) -> anyhow::Result<Vec<PreparedDevice>> {
        let lock = self.claim_lock(&claim.uid);
        let _held = lock.lock().await;
        if let Some(done) = self.parts.store.get(&claim.uid) {
            self.refresh_recorded(&claim.uid, &done, true).await?;
            // Idempotent: heals a status write lost to a crash or an API error.
            self.report(status::StatusJob::Prepared {
                claim: claim.clone(),
                devices: done.devices.clone(),
            });
            return Ok(done.devices);
        }
        let started = Instant::now();
        let Some((spec, mut devices, seen, meta)) = self.plan_claim(claim).await? else {
            tracing::debug!("nothing to attach on this node (a fabric partition claim)");
            return Ok(Vec::new());
        };
        let planned = started.elapsed();
        let files = self.parts.metadata.as_ref().map(|m| &m.files);
        let mut written = Written::default();
        if let (Some(files), Some((claim_meta, requests))) = (files, &meta) {
            written = files.write(claim_meta, requests)?;
            add_metadata_ids(&mut devices, &written.ids);
        }
        let spec_files: Vec<String> = written.specs.keys().cloned().collect();
        let recorded = MetadataRecord {
            requests: written.requests.into_iter().collect(),
            pod_claim_name: meta.and_then(|(claim, _)| claim.pod_claim_name),
        };
        let committed = self.commit(claim, spec, &devices, written.specs, recorded);
        if let Err(error) = committed.await {
            let removed = files.map(|f| f.remove(&claim.uid, &spec_files));
            if let Some(Err(cleanup)) = removed {
                tracing::error!(error = %cleanup, "failed to remove device metadata after a failed prepare");
            }
            return Err(error);
        }
        // The inventory changed while this claim was planned: the refresh
        // that followed did not see it yet, so check it now.
        if !Arc::ptr_eq(&seen, &self.parts.inventory.borrow()) {
            let record = self.parts.store.get(&claim.uid).expect("just recorded");
            self.refresh_recorded(&claim.uid, &record, true).await?;
        }
        self.report(status::StatusJob::Prepared {
            claim: claim.clone(),
            devices: devices.clone(),
        });
        tracing::debug!(
            plan_us = planned.as_micros(),
            commit_us = (started.elapsed() - planned).as_micros(),
            "prepare phases"
        );
        Ok(devices)
    }

    /// Writes the device-metadata specs and files of recorded claim `uid`
    /// again where they are missing or damaged (a reboot empties the CDI
    /// directory; the files are not fsynced). Specs come from the record.
    /// Files of entries of older agents too; this agent's are rebuilt from
    /// the claim's devices and today's attributes and network data, the
    /// damaged ones only. Before the node's devices are published, only a
    /// call of the kubelet waits for them (as a prepare does): start-up and
    /// inventory checks leave a damaged file to the kubelet's next prepare
    /// of the claim, which comes before its containers start.
    pub(super) async fn restore_metadata(
        &self,
        uid: &str,
        record: &PreparedClaim,
        kubelet_waits: bool,
    ) -> anyhow::Result<()> {
        let Some(parts) = &self.parts.metadata else {
            return Ok(());
        };
        for (file, spec) in &record.metadata_specs {
            if parts.files.restore(file, spec)? {
                tracing::info!(claim_uid = %uid, file, "device-metadata CDI spec written again");
            }
        }
        let root = parts.files.root_of(&record.metadata_specs);
        if !parts.files.is_known_root(&root) {
            tracing::warn!(claim_uid = %uid, dir = %root.display(), "the claim's device metadata is kept where it was written, in a former --metadata-dir: the agent writes it again there when lost, which only a mount of that directory makes reach the host (drain the node before changing the directory)");
        }
        for (request, content) in &record.metadata_files {
            if parts.files.restore_file(&root, uid, request, content)? {
                tracing::info!(claim_uid = %uid, request, "device-metadata file written again");
            }
        }
        let claim = ClaimMeta {
            namespace: record.namespace.clone(),
            name: record.name.clone(),
            uid: uid.to_string(),
            pod_claim_name: record.metadata.pod_claim_name.clone(),
        };
        let damaged = (parts.files).damaged(&root, &claim, &record.metadata.requests)?;
        if damaged.is_empty() {
            return Ok(());
        }
        if !kubelet_waits && parts.attributes.borrow().is_none() {
            tracing::warn!(claim_uid = %uid, requests = ?damaged, "device-metadata files missing or cut short: written again at the kubelet's next prepare of the claim, once the devices are published");
            return Ok(());
        }
        // Written without the attributes, the file would pass for whole and
        // never be written again: the kubelet retries instead.
        let mut attributes = parts.attributes.clone();
        let published = attributes.wait_for(Option::is_some);
        if !matches!(
            tokio::time::timeout(ATTRIBUTES_WAIT, published).await,
            Ok(Ok(_))
        ) {
            anyhow::bail!(
                "claim {}/{}: its device-metadata files of requests {damaged:?} are lost (a reboot empties the metadata directory) and the node's devices are not published yet to write them again from; the kubelet retries",
                record.namespace,
                record.name
            );
        }
        let inventory = self.parts.inventory.borrow().clone();
        let mut requests = self
            .request_metadata(parts, &record.devices, &inventory)
            .await;
        requests.retain(|r| damaged.iter().any(|d| d == r.base()));
        parts.files.rewrite(&root, &claim, &requests)?;
        tracing::info!(claim_uid = %uid, requests = ?damaged, "device-metadata files written again");
        Ok(())
    }

    /// Reads the claim and builds its CDI spec, the kubelet's answer and
    /// (when on) the claim's device metadata; writes nothing. `None` when
    /// the claim has nothing to attach here.
    pub(super) async fn plan_claim(&self, claim: &ClaimRef) -> anyhow::Result<Option<Planned>> {
        let asked = Instant::now();
        let object = self.parts.claims.get(&claim.namespace, &claim.name).await?;
        tracing::debug!(get_us = asked.elapsed().as_micros(), "claim read");
        names::check(claim, &object, &self.parts.scope)?;
        let inventory = self.parts.inventory.borrow().clone();
        let planned = resolve::plan(&object, &claim.uid, &self.parts.scope, &inventory)?;
        if planned.is_empty() {
            return Ok(None);
        }
        let not_ready = match &self.parts.sandboxes {
            Some(sandboxes) => sandboxes.not_ready(),
            None => Some("it is off on this node"),
        };
        if let Some(p) = planned.iter().find(|p| p.netdev.is_some())
            && let Some(why) = not_ready
        {
            anyhow::bail!(
                "claim {}/{}: request {} is in exclusive netdev mode, which needs the node agent's NRI plugin (--nri-socket, chart netdevMode.enabled): {why}",
                claim.namespace,
                claim.name,
                p.request
            );
        }
        let gates = self.parts.cdi.path();
        let attached: Vec<cdi::AttachedDevice> = planned
            .iter()
            .map(|p| cdi::AttachedDevice {
                netdev_gate: (p.netdev.as_ref())
                    .map(|_| cdi::netdev_gate(gates, &claim.uid, &p.attached.device)),
                ..p.attached.clone()
            })
            .collect();
        let spec = cdi::build(
            &claim.uid,
            &attached,
            inventory.rdma_cm.as_ref(),
            &self.parts.dev,
        )?;
        let devices = planned
            .iter()
            .zip(&spec.device_ids)
            .map(|(p, id)| PreparedDevice {
                requests: vec![p.request.clone()],
                pool: self.parts.scope.pool.clone(),
                device: p.attached.device.clone(),
                share_id: p.attached.share.as_ref().map(|s| s.id.clone()),
                admin_access: p.admin_access,
                cdi_ids: vec![id.clone()],
                identity: Some(respec::identity_of(&p.attached)),
                netdev: p.netdev.clone(),
            })
            .collect::<Vec<_>>();
        let meta = match self.parts.metadata.as_ref().filter(|m| m.write) {
            Some(parts) => {
                let requests = self.request_metadata(parts, &devices, &inventory).await;
                Some((claim_meta(claim, &object), requests))
            }
            None => None,
        };
        Ok(Some((spec, devices, inventory, meta)))
    }

    /// The devices of each request, with their published attributes and
    /// network data.
    pub(super) async fn request_metadata(
        &self,
        parts: &MetadataParts,
        devices: &[PreparedDevice],
        inventory: &Inventory,
    ) -> Vec<RequestMeta> {
        let mut attributes = parts.attributes.clone();
        let waited = tokio::time::timeout(ATTRIBUTES_WAIT, attributes.wait_for(Option::is_some));
        let published = match waited.await {
            Ok(Ok(published)) => published.clone().unwrap_or_default(),
            _ => {
                tracing::warn!("no published attributes yet: device metadata written without them");
                Arc::default()
            }
        };
        let mut requests: Vec<RequestMeta> = Vec::new();
        for device in devices {
            let mut net = status::netdev_of(device, inventory);
            if let Some(ifname) = &net.interface_name {
                net.ips = parts.addresses.of(ifname).await;
            }
            let entry = MetaDevice {
                pool: device.pool.clone(),
                name: device.device.clone(),
                attributes: published.get(&device.device),
                network: net.interface_name.is_some().then(|| net.to_api()),
            };
            let name = device.requests.first().cloned().unwrap_or_default();
            match requests.iter_mut().find(|r| r.request == name) {
                Some(request) => request.devices.push(entry),
                None => requests.push(RequestMeta {
                    request: name,
                    devices: vec![entry],
                }),
            }
        }
        requests
    }

    /// Writes the CDI spec, then records the claim in the checkpoint
    /// unless another claim holds one of its devices exclusively; when it
    /// is not recorded the spec is removed again.
    pub(super) async fn commit(
        &self,
        claim: &ClaimRef,
        spec: cdi::ClaimSpec,
        devices: &[PreparedDevice],
        metadata_specs: BTreeMap<String, String>,
        metadata: MetadataRecord,
    ) -> anyhow::Result<()> {
        faults::hit(Point::PrepareBeforeCdi);
        self.parts.cdi.write(&spec)?;
        faults::hit(Point::PrepareAfterCdi);
        let record = PreparedClaim {
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
            devices: devices.to_vec(),
            cdi_file: spec.file_name.clone(),
            // Rebuilt from the devices' identities when needed.
            cdi_spec: String::new(),
            metadata_specs,
            metadata_files: BTreeMap::new(),
            metadata,
        };
        if let Err(e) = self.parts.store.insert_exclusive(&claim.uid, record).await {
            if let Err(cleanup) = self.parts.cdi.remove(&spec.file_name) {
                tracing::error!(error = %cleanup, "failed to remove CDI spec after checkpoint failure");
            }
            return Err(e.into());
        }
        faults::hit(Point::PrepareAfterCheckpoint);
        Ok(())
    }
}
