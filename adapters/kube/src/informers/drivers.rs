//! CSIDriver events: which drivers need attach, and the volumes whose tracking changes with
//! them.

use std::collections::BTreeSet;

use attach_detach::core::Input;
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::runtime::watcher::Event;

use super::{InformerState, PodVolume, Source};
use crate::domain::{Kube, split_unique_name};
use crate::drivers::CsiDrivers;

impl InformerState {
    /// The registry of which drivers need attach, as the CSIDriver watcher shows it: hand it
    /// to the backend ([`VolumeAttachmentBackend::new`](crate::VolumeAttachmentBackend::new)).
    pub fn csi_drivers(&self) -> CsiDrivers {
        self.csi_drivers.clone()
    }

    /// One event of the CSIDriver watcher: the registry is updated, and when a driver starts
    /// or stops needing attach, its volumes are set or removed and their pods sent again.
    pub fn drivers(&mut self, event: Event<CSIDriver>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => self.relist_start(Source::Drivers),
            Event::InitApply(driver) | Event::Apply(driver) => {
                if let Some(name) = driver.metadata.name.clone() {
                    self.seen(Source::Drivers, &name);
                    self.drivers.insert(name.clone());
                    self.change_driver(&name, |registry| registry.apply(&driver), &mut out);
                }
            }
            Event::Delete(driver) => {
                if let Some(name) = driver.metadata.name {
                    self.drivers.remove(&name);
                    self.change_driver(&name, |registry| registry.remove(&name), &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.drivers.iter().cloned().collect();
                for name in self.relist_end(Source::Drivers, known.into_iter()) {
                    self.drivers.remove(&name);
                    self.change_driver(&name, |registry| registry.remove(&name), &mut out);
                }
            }
        }
        out
    }

    /// Applies `change` to the registry; if `driver` starts or stops needing attach, its
    /// volumes are set (or removed) and the pods bound to them are sent again.
    fn change_driver(
        &mut self,
        driver: &str,
        change: impl FnOnce(&CsiDrivers),
        out: &mut Vec<Input<Kube>>,
    ) {
        let before = self.tracked(driver);
        change(&self.csi_drivers);
        if self.tracked(driver) == before {
            return;
        }
        let volumes: Vec<(String, String)> = {
            let index = self.index.read();
            let mut volumes: Vec<(String, String)> = index
                .pvs
                .iter()
                .filter(|(unique, _)| split_unique_name(unique).is_some_and(|(d, _)| d == driver))
                .filter_map(|(unique, pvs)| Some((unique.clone(), pvs.first()?.clone())))
                .collect();
            volumes.sort();
            volumes
        };
        let mut claims = BTreeSet::new();
        for (unique, pv) in volumes {
            match self.spec_of(&pv) {
                Some(spec) => out.push(Input::SetVolume {
                    volume: unique,
                    spec,
                }),
                None => out.push(Input::VolumeRemoved { volume: unique }),
            }
        }
        for (name, entry) in &self.pvs {
            if entry
                .csi
                .as_ref()
                .is_some_and(|c| c.spec.payload.driver == driver)
                && let Some(bound) = self.claims_by_pv.get(name)
            {
                claims.extend(bound.iter().cloned());
            }
        }
        self.rederive(claims, out);
        // And the pods with an inline volume of the driver.
        let inline: BTreeSet<String> = self
            .pods
            .iter()
            .filter(|(_, pod)| {
                pod.volumes.iter().any(|volume| {
                    matches!(volume, PodVolume::Inline(inline)
                        if inline.0.spec.payload.driver == driver)
                })
            })
            .map(|(key, _)| key.clone())
            .collect();
        self.rederive_pods(inline, out);
    }
}
