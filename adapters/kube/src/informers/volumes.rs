//! PersistentVolumeClaim and PersistentVolume events: a claim bound to a PV and a PV's CSI
//! spec decide the volume the pods using them are sent with.

use attach_detach::core::{Input, Kind};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::runtime::watcher::Event;
use tracing::warn;

use super::{ClaimEntry, InformerState, PvEntry, Source, Translated, key_of, translated};
use crate::domain::{AttachSource, Kube};
use crate::translate::translate_persistent_volume;

impl InformerState {
    /// One event of the PersistentVolumeClaim watcher.
    pub fn claims(&mut self, event: Event<PersistentVolumeClaim>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => self.relist_start(Source::Claims),
            Event::InitApply(pvc) => {
                if let Some(key) = key_of(&pvc) {
                    self.seen(Source::Claims, &key);
                    self.apply_claim(key, &pvc, &mut out);
                }
            }
            Event::Apply(pvc) => {
                if let Some(key) = key_of(&pvc) {
                    self.apply_claim(key, &pvc, &mut out);
                }
            }
            Event::Delete(pvc) => {
                if let Some(key) = key_of(&pvc) {
                    self.remove_claim(&key);
                    self.rederive([key], &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.claims.keys().cloned().collect();
                let gone = self.relist_end(Source::Claims, known.into_iter());
                for key in &gone {
                    self.remove_claim(key);
                }
                self.rederive(gone, &mut out);
            }
        }
        out
    }

    fn apply_claim(
        &mut self,
        key: String,
        pvc: &PersistentVolumeClaim,
        out: &mut Vec<Input<Kube>>,
    ) {
        let bound = (pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .then(|| pvc.spec.as_ref().and_then(|s| s.volume_name.clone()))
            .flatten()
            .filter(|name| !name.is_empty());
        let owner = pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone());
        let entry = ClaimEntry {
            uid: pvc.metadata.uid.clone().unwrap_or_default(),
            bound,
            owner,
        };
        if self.claims.get(&key) == Some(&entry) {
            return;
        }
        self.remove_claim(&key);
        if let Some(pv) = &entry.bound {
            self.claims_by_pv
                .entry(pv.clone())
                .or_default()
                .insert(key.clone());
        }
        self.claims.insert(key.clone(), entry);
        self.rederive([key], out);
    }

    fn remove_claim(&mut self, key: &str) {
        let Some(old) = self.claims.remove(key) else {
            return;
        };
        if let Some(pv) = old.bound
            && let Some(claims) = self.claims_by_pv.get_mut(&pv)
        {
            claims.remove(key);
            if claims.is_empty() {
                self.claims_by_pv.remove(&pv);
            }
        }
    }

    /// One event of the PersistentVolume watcher.
    pub fn volumes(&mut self, event: Event<PersistentVolume>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => {
                self.relist_start(Source::Volumes);
                out.push(Input::RelistStarted { kind: Kind::Volume });
            }
            Event::InitApply(pv) => self.apply_pv(&pv, true, &mut out),
            Event::Apply(pv) => self.apply_pv(&pv, false, &mut out),
            Event::Delete(pv) => {
                if let Some(name) = pv.metadata.name.clone() {
                    self.remove_pv(&name, true, &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.pvs.keys().cloned().collect();
                for name in self.relist_end(Source::Volumes, known.into_iter()) {
                    // The core removes the volume at RelistDone unless another PV set it.
                    self.remove_pv(&name, false, &mut out);
                }
                // An inline volume has no PV to be listed: set, it counts as seen.
                out.extend(self.inline_only());
                out.push(Input::RelistDone { kind: Kind::Volume });
            }
        }
        out
    }

    fn apply_pv(&mut self, pv: &PersistentVolume, relist: bool, out: &mut Vec<Input<Kube>>) {
        let Some(name) = pv.metadata.name.clone() else {
            return;
        };
        if relist {
            self.seen(Source::Volumes, &name);
        }
        let spec = pv.spec.as_ref();
        let csi = match translate_persistent_volume(pv) {
            Ok(csi) => csi,
            Err(error) => {
                warn!(pv = name, %error, "CSI migration cannot translate the PersistentVolume: \
                      its pods do not get it attached");
                None
            }
        };
        let csi = csi.map(|csi| translated(&csi, AttachSource::PersistentVolume(name.clone())));
        let entry = PvEntry {
            csi,
            claim_uid: spec
                .and_then(|s| s.claim_ref.as_ref())
                .and_then(|r| r.uid.clone())
                .filter(|uid| !uid.is_empty()),
        };
        let previous = self.pvs.get(&name).cloned();
        if previous.as_ref() == Some(&entry) && !relist {
            return;
        }
        // A PV whose unique name changed (deleted and created again in a gap) leaves the old.
        if let Some(old) = &previous
            && old.csi.as_ref().map(|c| &c.unique) != entry.csi.as_ref().map(|c| &c.unique)
        {
            self.remove_pv(&name, true, out);
        }
        if let Some(Translated { unique, spec, .. }) = &entry.csi {
            self.index
                .write()
                .pvs
                .entry(unique.clone())
                .or_default()
                .insert(name.clone());
            if self.tracked(&spec.payload.driver) {
                out.push(Input::SetVolume {
                    volume: unique.clone(),
                    spec: spec.clone(),
                });
            }
        }
        self.pvs.insert(name.clone(), entry);
        let claims: Vec<String> = self
            .claims_by_pv
            .get(&name)
            .map(|c| c.iter().cloned().collect())
            .unwrap_or_default();
        self.rederive(claims, out);
    }

    /// Drops a PV; `announce`: send `VolumeRemoved` (or `SetVolume` from the PV that still
    /// has the unique name) rather than leave the volume to the core's relist.
    fn remove_pv(&mut self, name: &str, announce: bool, out: &mut Vec<Input<Kube>>) {
        let Some(old) = self.pvs.remove(name) else {
            return;
        };
        if let Some(Translated { unique, spec, .. }) = &old.csi {
            let remaining = {
                let mut index = self.index.write();
                let remaining = index.pvs.get_mut(unique).and_then(|pvs| {
                    pvs.remove(name);
                    pvs.first().cloned()
                });
                if remaining.is_none() {
                    index.pvs.remove(unique);
                }
                remaining
            };
            if announce && self.tracked(&spec.payload.driver) {
                // Another PV of the volume, or pods needing it inline, keep it.
                let kept = remaining
                    .and_then(|pv| self.spec_of(&pv))
                    .or_else(|| self.inline.get(unique).map(|entry| entry.spec.clone()));
                match kept {
                    Some(spec) => out.push(Input::SetVolume {
                        volume: unique.clone(),
                        spec,
                    }),
                    None => out.push(Input::VolumeRemoved {
                        volume: unique.clone(),
                    }),
                }
            }
        }
        let claims: Vec<String> = self
            .claims_by_pv
            .get(name)
            .map(|c| c.iter().cloned().collect())
            .unwrap_or_default();
        self.rederive(claims, out);
    }
}
