//! CSI migration's golden cases: for each in-tree plugin, volumes taken from the test cases of
//! upstream's `k8s.io/csi-translation-lib` (file and test named beside each) and of
//! kube-controller-manager's attach/detach controller, translated here, must give the driver,
//! the volume handle and the spec upstream's translation gives, hence the unique volume name
//! kubelet waits for in `Node.status.volumesAttached` and the VolumeAttachment name kubelet
//! reads. The VolumeAttachment names were computed apart from this crate:
//! `printf %s "${handle}${driver}node-a" | sha256sum`.

use attach_detach::core::Access;
use attach_detach_kube::{
    CsiMigration, CsiSpec, InTreePlugin, MIGRATED_PLUGINS_ANNOTATION, MigratedNode,
    NodeMigrationError, TranslationError, attachment_name, translate_inline_volume,
    translate_persistent_volume,
};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeSpec, Volume};
use k8s_openapi::api::storage::v1::CSINode;
use serde_json::{Value, json};

fn pv(object: Value) -> PersistentVolume {
    serde_json::from_value(object).expect("a PersistentVolume")
}

fn inline(object: Value) -> Volume {
    serde_json::from_value(object).expect("a Volume")
}

fn spec(object: Value) -> PersistentVolumeSpec {
    serde_json::from_value(object).expect("a PersistentVolumeSpec")
}

/// Asserts what kubelet derives from the translated volume: its driver and handle, the unique
/// name `kubernetes.io/csi/{driver}^{handle}`, and the VolumeAttachment on `node-a`.
fn golden(csi: &CsiSpec, plugin: InTreePlugin, driver: &str, handle: &str, attachment: &str) {
    assert_eq!(csi.plugin(), Some(plugin));
    assert_eq!(csi.driver(), driver);
    assert_eq!(plugin.driver(), driver);
    assert_eq!(csi.handle(), handle);
    assert_eq!(
        csi.unique_name(),
        format!("kubernetes.io/csi/{driver}^{handle}")
    );
    assert_eq!(
        attachment_name(csi.handle(), csi.driver(), "node-a"),
        attachment
    );
}

fn translated(object: Value) -> CsiSpec {
    translate_persistent_volume(&pv(object))
        .expect("a translation")
        .expect("a migrated plugin")
}

fn translated_inline(object: Value, namespace: &str) -> CsiSpec {
    translate_inline_volume(&inline(object), namespace)
        .expect("a translation")
        .expect("a migrated plugin")
}

// ---- awsElasticBlockStore → ebs.csi.aws.com ----

#[test]
fn aws_ebs_pv() {
    // csi-translation-lib translate_test.go, TestTranslationStability, "AWS EBS PV Source".
    let csi = translated(json!({
        "metadata": {"name": "pv-ebs"},
        "spec": {"awsElasticBlockStore": {"volumeID": "vol01", "fsType": "ext3", "partition": 1, "readOnly": true}},
    }));
    golden(
        &csi,
        InTreePlugin::AwsEbs,
        "ebs.csi.aws.com",
        "vol01",
        "csi-a685b0ab96c81f506309d7391aa64ab3c6878e3f3d7722ea2361f088ff1e1935",
    );
    assert_eq!(csi.name(), "pv-ebs");
    assert_eq!(
        csi.spec(),
        spec(json!({"csi": {
            "driver": "ebs.csi.aws.com", "volumeHandle": "vol01", "fsType": "ext3", "readOnly": true,
            "volumeAttributes": {"partition": "1"},
        }}))
    );
}

#[test]
fn aws_ebs_inline_in_each_volume_id_form() {
    // csi-translation-lib plugins/aws_ebs_test.go, TestTranslateInTreeInlineVolumeToCSI:
    // "Normal ID format", "aws:///{volumeId} format", "aws://{zone}/{volumeId} format".
    for id in [
        "vol-02399794d890f9375",
        "aws:///vol-02399794d890f9375",
        "aws://us-west-2a/vol-02399794d890f9375",
    ] {
        let csi = translated_inline(
            json!({"name": "data", "awsElasticBlockStore": {"volumeID": id}}),
            "ns",
        );
        golden(
            &csi,
            InTreePlugin::AwsEbs,
            "ebs.csi.aws.com",
            "vol-02399794d890f9375",
            "csi-a3a2ff69dddc55fc1517c7fe6911af87ec485a03e91e88672c8da7325cb785a0",
        );
        assert_eq!(csi.name(), "ebs.csi.aws.com-vol-02399794d890f9375");
        assert_eq!(csi.access(), Access::SingleNode);
    }
    // "fails on invalid volume ID".
    let bad = json!({"name": "data", "awsElasticBlockStore": {"volumeID": "aws://us-west-2a/02399794d890f9375"}});
    assert_eq!(
        translate_inline_volume(&inline(bad), "ns"),
        Err(TranslationError::EbsVolumeId(
            "aws://us-west-2a/02399794d890f9375".into()
        ))
    );
}

// ---- gcePersistentDisk → pd.csi.storage.gke.io ----

#[test]
fn gce_pd_pv_handles_by_zone_labels() {
    // csi-translation-lib plugins/gce_pd_test.go, TestTranslateInTreePVToCSIVolIDFmt.
    for (label, zones, handle, attachment) in [
        (
            "failure-domain.beta.kubernetes.io/zone",
            "us-east1-a",
            "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name",
            "csi-e04baa0421c6f0c445b0922b9c2d576c07a305665dc564d7bf824f34fc82e5db",
        ),
        (
            "topology.kubernetes.io/zone",
            "us-east1-a",
            "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name",
            "csi-e04baa0421c6f0c445b0922b9c2d576c07a305665dc564d7bf824f34fc82e5db",
        ),
        (
            "failure-domain.beta.kubernetes.io/zone",
            "us-central1-a__us-central1-c",
            "projects/UNSPECIFIED/regions/us-central1/disks/pd-name",
            "csi-96e2aff3a2a2fc792c399416ee116dad6770b387069ba90adcefcdb6f5a9325f",
        ),
        (
            "topology.kubernetes.io/zone",
            "us-central1-a__us-central1-c",
            "projects/UNSPECIFIED/regions/us-central1/disks/pd-name",
            "csi-96e2aff3a2a2fc792c399416ee116dad6770b387069ba90adcefcdb6f5a9325f",
        ),
    ] {
        let csi = translated(json!({
            "metadata": {"name": "pv-pd", "labels": {label: zones}},
            "spec": {"gcePersistentDisk": {"pdName": "pd-name"}},
        }));
        golden(
            &csi,
            InTreePlugin::GcePd,
            "pd.csi.storage.gke.io",
            handle,
            attachment,
        );
    }
    // Zones of two regions name no disk.
    let two_regions = json!({
        "metadata": {"name": "pv-pd", "labels": {"topology.kubernetes.io/zone": "us-central1-a__europe-west1-b"}},
        "spec": {"gcePersistentDisk": {"pdName": "pd-name"}},
    });
    assert!(matches!(
        translate_persistent_volume(&pv(two_regions)),
        Err(TranslationError::GceZones(_))
    ));
}

#[test]
fn gce_pd_pv_as_the_attach_detach_controller_translates_it() {
    // kubernetes pkg/controller/volume/attachdetach/util/util_test.go, Test_CreateVolumeSpec,
    // "pv type that supports csi migration": no zone label, no access modes.
    let csi = translated(json!({
        "metadata": {"name": "migrated-volume-name"},
        "spec": {
            "gcePersistentDisk": {"pdName": "test-disk", "fsType": "ext4", "partition": 0, "readOnly": false},
            "claimRef": {"namespace": "default", "name": "migrated-pvc"},
        },
    }));
    golden(
        &csi,
        InTreePlugin::GcePd,
        "pd.csi.storage.gke.io",
        "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/test-disk",
        "csi-facf590ec2210668f059e464bfd19c34dfdd9920030f68ab7dfd1707d659fc56",
    );
    assert_eq!(
        csi.spec(),
        spec(json!({
            "csi": {
                "driver": "pd.csi.storage.gke.io",
                "volumeHandle": "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/test-disk",
                "fsType": "ext4",
                "volumeAttributes": {"partition": ""},
            },
            "claimRef": {"namespace": "default", "name": "migrated-pvc"},
        }))
    );
}

#[test]
fn gce_pd_pv_access_modes_are_made_compatible() {
    // csi-translation-lib plugins/gce_pd_test.go, TestBackwardCompatibleAccessModes, "RWX":
    // the in-tree plugin attached such a disk read-write to one node, and so must we.
    let csi = translated(json!({
        "metadata": {"name": "pv-pd"},
        "spec": {"accessModes": ["ReadWriteMany"], "gcePersistentDisk": {"pdName": "pd-name"}},
    }));
    assert_eq!(
        csi.spec().access_modes,
        Some(vec!["ReadWriteOnce".to_owned()])
    );
    assert_eq!(csi.access(), Access::SingleNode);
}

#[test]
fn gce_pd_inline_as_the_attach_detach_controller_translates_it() {
    // kubernetes pkg/controller/volume/attachdetach/util/util_test.go, Test_CreateVolumeSpec,
    // "inline volume type that supports csi migration": the spec is what the VolumeAttachment's
    // inlineVolumeSpec carries.
    let csi = translated_inline(
        json!({"name": "migrated-volume-name", "gcePersistentDisk": {
            "pdName": "test-disk", "fsType": "ext4", "partition": 0, "readOnly": false,
        }}),
        "default",
    );
    golden(
        &csi,
        InTreePlugin::GcePd,
        "pd.csi.storage.gke.io",
        "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/test-disk",
        "csi-facf590ec2210668f059e464bfd19c34dfdd9920030f68ab7dfd1707d659fc56",
    );
    assert_eq!(csi.name(), "pd.csi.storage.gke.io-test-disk");
    assert_eq!(
        csi.spec(),
        spec(json!({
            "csi": {
                "driver": "pd.csi.storage.gke.io",
                "volumeHandle": "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/test-disk",
                "fsType": "ext4",
                "volumeAttributes": {"partition": ""},
            },
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
        }))
    );
}

#[test]
fn gce_pd_inline_read_only_is_read_only_many() {
    // csi-translation-lib plugins/gce_pd_test.go, TestInlineReadOnly.
    let csi = translated_inline(
        json!({"name": "v", "gcePersistentDisk": {"pdName": "foo", "readOnly": true}}),
        "",
    );
    let spec = csi.spec();
    assert_eq!(spec.csi.unwrap().read_only, Some(true));
    assert_eq!(spec.access_modes, Some(vec!["ReadOnlyMany".to_owned()]));
    assert_eq!(csi.access(), Access::MultiNode);
}

// ---- azureDisk → disk.csi.azure.com ----

#[test]
fn azure_disk_pv() {
    // csi-translation-lib plugins/azure_disk_test.go, TestTranslateAzureDiskInTreePVToCSI,
    // "azure disk volume".
    let uri = "/subscriptions/12/resourceGroups/23/providers/Microsoft.Compute/disks/name";
    let csi = translated(json!({
        "metadata": {"name": "pv-disk"},
        "spec": {"azureDisk": {
            "cachingMode": "cachingmode", "diskURI": uri, "diskName": "name", "fsType": "fstype", "readOnly": true,
        }},
    }));
    golden(
        &csi,
        InTreePlugin::AzureDisk,
        "disk.csi.azure.com",
        uri,
        "csi-46b47cd3deded73cc4f98c4b51f1878686b1296996d0b259329c3ca4909805bd",
    );
    assert_eq!(
        csi.spec(),
        spec(json!({"csi": {
            "driver": "disk.csi.azure.com", "volumeHandle": uri, "fsType": "fstype", "readOnly": true,
            "volumeAttributes": {"cachingmode": "cachingmode", "fstype": "fstype", "kind": "Managed"},
        }}))
    );
    // "azure disk volume with non-managed kind".
    let dedicated = json!({
        "metadata": {"name": "pv-disk"},
        "spec": {"azureDisk": {"diskURI": uri, "diskName": "name", "kind": "Dedicated"}},
    });
    assert_eq!(
        translate_persistent_volume(&pv(dedicated)),
        Err(TranslationError::AzureDiskKind("Dedicated".into()))
    );
}

#[test]
fn azure_disk_inline() {
    // csi-translation-lib plugins/azure_disk_test.go,
    // TestTranslateAzureDiskInTreeInlineVolumeToCSI, "azure disk volume" (with the volume mode
    // translate.go's TranslateInTreeInlineVolumeToCSI adds).
    let csi = translated_inline(
        json!({"name": "v", "azureDisk": {"diskName": "diskname", "diskURI": "datadiskuri"}}),
        "",
    );
    golden(
        &csi,
        InTreePlugin::AzureDisk,
        "disk.csi.azure.com",
        "datadiskuri",
        "csi-28f2160cdfa20014725c76ec5c4c66c82fa70836d4c2b394691f16cadb3aa19a",
    );
    assert_eq!(csi.name(), "datadiskuri");
    assert_eq!(
        csi.spec(),
        spec(json!({
            "csi": {"driver": "disk.csi.azure.com", "volumeHandle": "datadiskuri", "volumeAttributes": {"kind": "Managed"}},
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
        }))
    );
    // "azure disk volume with non-managed kind".
    let shared =
        json!({"name": "v", "azureDisk": {"diskName": "d", "diskURI": "u", "kind": "Dedicated"}});
    assert!(translate_inline_volume(&inline(shared), "").is_err());
}

// ---- azureFile → file.csi.azure.com (a driver that needs no attach) ----

#[test]
fn azure_file_pv() {
    // csi-translation-lib plugins/azure_file_test.go, TestTranslateAzureFileInTreePVToCSI.
    let source = |namespace: Option<&str>| {
        let mut file =
            json!({"shareName": "sharename", "secretName": "secretname", "readOnly": true});
        if let Some(namespace) = namespace {
            file["secretNamespace"] = json!(namespace);
        }
        file
    };
    // "azure file volume".
    let csi = translated(json!({
        "metadata": {"name": "uuid"},
        "spec": {"azureFile": source(Some("secretnamespace"))},
    }));
    golden(
        &csi,
        InTreePlugin::AzureFile,
        "file.csi.azure.com",
        "#secretname#sharename#uuid#secretnamespace",
        "csi-ea417dbf5a6d19320f0461495360c40c6c0681d10ce0efbacf9debd7c22abdf1",
    );
    assert_eq!(
        csi.spec(),
        spec(json!({"csi": {
            "driver": "file.csi.azure.com", "readOnly": true,
            "nodeStageSecretRef": {"name": "secretname", "namespace": "secretnamespace"},
            "volumeAttributes": {"sharename": "sharename"},
            "volumeHandle": "#secretname#sharename#uuid#secretnamespace",
        }}))
    );
    // "azure file volume with rg annotation".
    let annotated =
        json!({"name": "uuid", "annotations": {"kubernetes.io/azure-file-resource-group": "rg"}});
    let csi = translated(json!({
        "metadata": annotated,
        "spec": {"azureFile": source(Some("secretnamespace"))},
    }));
    golden(
        &csi,
        InTreePlugin::AzureFile,
        "file.csi.azure.com",
        "rg#secretname#sharename#uuid#secretnamespace",
        "csi-9f2e069cdf697e68ab8918c20b9e57a238a9641596427034c2f6320dae9d0c58",
    );
    // "get secret namespace from ClaimRef when it's missing in pv spec source".
    let csi = translated(json!({
        "metadata": annotated,
        "spec": {"azureFile": source(None), "claimRef": {"namespace": "secretnamespace"}},
    }));
    assert_eq!(csi.handle(), "rg#secretname#sharename#uuid#secretnamespace");
    // "return error if secret namespace could not be found".
    let nowhere = json!({"metadata": annotated, "spec": {"azureFile": source(None)}});
    assert_eq!(
        translate_persistent_volume(&pv(nowhere)),
        Err(TranslationError::AzureFileNamespace("uuid".into()))
    );
}

#[test]
fn azure_file_inline_names_are_per_volume_and_namespace() {
    // csi-translation-lib translate_test.go, TestTranslateInTreeInlineVolumeToCSINameUniqueness,
    // "file.csi.azure.com"; the handle's form is azure_file.go's
    // TranslateInTreeInlineVolumeToCSI: the account from the secret's name, the volume's name
    // and the pod's namespace (default when none is given).
    let volume = |secret: &str, share: &str| json!({"name": "data", "azureFile": {"secretName": secret, "shareName": share}});
    let a = translated_inline(volume("azure-storage-account-acct-secret", "share-a"), "ns");
    let b = translated_inline(volume("azure-storage-account-acct-secret", "share-b"), "");
    assert_eq!(a.handle(), "#acct#share-a#data#ns");
    assert_eq!(b.handle(), "#acct#share-b#data#default");
    assert_ne!(a.name(), b.name());
    assert_eq!(a.access(), Access::MultiNode);
}

// ---- cinder → cinder.csi.openstack.org ----

#[test]
fn cinder_pv_and_inline() {
    // csi-translation-lib translate_test.go, TestTopologyTranslation, "OpenStack Cinder with
    // zone labels" (makeCinderPV's volume).
    let csi = translated(json!({
        "metadata": {"name": "pv-cinder", "labels": {"topology.kubernetes.io/zone": "us-east-1a"}},
        "spec": {"cinder": {"volumeID": "vol1"}},
    }));
    golden(
        &csi,
        InTreePlugin::Cinder,
        "cinder.csi.openstack.org",
        "vol1",
        "csi-a414c97a1008c4a0e3d4c69a84e461ac4470783398bc956409d3d5e4fe407d22",
    );
    // translate_test.go, TestTranslateInTreeInlineVolumeToCSINameUniqueness, "cinder...".
    let csi = translated_inline(json!({"name": "v", "cinder": {"volumeID": "vol1"}}), "");
    assert_eq!(
        csi.unique_name(),
        "kubernetes.io/csi/cinder.csi.openstack.org^vol1"
    );
    assert_eq!(csi.name(), "cinder.csi.openstack.org-vol1");
    let other = translated_inline(json!({"name": "v", "cinder": {"volumeID": "vol2"}}), "");
    assert_ne!(csi.name(), other.name());
}

// ---- vsphereVolume → csi.vsphere.vmware.com ----

#[test]
fn vsphere_pv() {
    // csi-translation-lib plugins/vsphere_volume_test.go, TestTranslateVSphereInTreePVToCSI,
    // "translate valid vSphere in-tree PV to vSphere CSI PV".
    let path = "[vsanDatastore] 6785a85e-268e-6352-a2e8-02008b7afadd/kubernetes-dynamic-pvc-68734c9f-a679-42e6-a694-39632c51e31f.vmdk";
    let csi = translated(json!({
        "metadata": {"name": "pvc-d8b4475f-2c47-486e-9b57-43ae006f9b59"},
        "spec": {
            "vsphereVolume": {"volumePath": path, "fsType": "ext4", "storagePolicyName": "vSAN Default Storage Policy"},
            "accessModes": ["ReadWriteOnce"],
        },
    }));
    golden(
        &csi,
        InTreePlugin::VSphere,
        "csi.vsphere.vmware.com",
        path,
        "csi-5458559ec475d219c9ac70f389993ac1ad94dc451b9393920d02ad739d31e329",
    );
    assert_eq!(
        csi.spec(),
        spec(json!({
            "csi": {
                "driver": "csi.vsphere.vmware.com", "volumeHandle": path, "fsType": "ext4",
                "volumeAttributes": {"storagepolicyname": "vSAN Default Storage Policy"},
            },
            "accessModes": ["ReadWriteOnce"],
        }))
    );
}

#[test]
fn vsphere_inline() {
    // csi-translation-lib plugins/vsphere_volume_test.go,
    // TestTranslatevSphereInTreeInlineVolumeToCSI, "translate valid in-tree vsphere volume to
    // vSphere CSI PV".
    let path = "[vsanDatastore] volume/inlinevolume.vmdk";
    let csi = translated_inline(
        json!({"name": "inlinevolume", "vsphereVolume": {"volumePath": path, "fsType": "ext4"}}),
        "",
    );
    golden(
        &csi,
        InTreePlugin::VSphere,
        "csi.vsphere.vmware.com",
        path,
        "csi-21a6b739e1a7526cbc69ad40e38b4edbbb85d51a91efac864dabab7ae563f789",
    );
    assert_eq!(csi.name(), format!("csi.vsphere.vmware.com-{path}"));
    assert_eq!(
        csi.spec(),
        spec(json!({
            "csi": {"driver": "csi.vsphere.vmware.com", "volumeHandle": path, "fsType": "ext4"},
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
        }))
    );
}

// ---- portworxVolume → pxd.portworx.com ----

#[test]
fn portworx_pv() {
    // csi-translation-lib plugins/portworx_test.go, TestTranslatePortworxInTreePVToCSI,
    // "normal".
    let csi = translated(json!({
        "metadata": {"name": "pxd.portworx.com"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "claimRef": {"name": "test-pvc", "namespace": "default"},
            "portworxVolume": {"volumeID": "ID1111", "fsType": "type", "readOnly": false},
        },
    }));
    golden(
        &csi,
        InTreePlugin::Portworx,
        "pxd.portworx.com",
        "ID1111",
        "csi-9fdbc6b7ea62e9e10857e278c467e9bcd6c3ea99f8628c09cf6532aa98397c35",
    );
    assert_eq!(
        csi.spec(),
        spec(json!({
            "accessModes": ["ReadWriteOnce"],
            "claimRef": {"name": "test-pvc", "namespace": "default"},
            "csi": {"driver": "pxd.portworx.com", "volumeHandle": "ID1111", "fsType": "type"},
        }))
    );
}

#[test]
fn portworx_inline() {
    // csi-translation-lib plugins/portworx_test.go, TestTranslatePortworxInTreeInlineVolumeToCSI,
    // "normal".
    let csi = translated_inline(
        json!({"name": "PortworxVol", "portworxVolume": {"volumeID": "ID", "fsType": "type", "readOnly": false}}),
        "ns",
    );
    golden(
        &csi,
        InTreePlugin::Portworx,
        "pxd.portworx.com",
        "ID",
        "csi-2bd7bdcb73a0566ba0395d5c3201fcf571c1d289bbda1a54dfc6eb9a405686ef",
    );
    assert_eq!(csi.name(), "pxd.portworx.com-ID");
    assert_eq!(
        csi.spec(),
        spec(json!({
            "csi": {"driver": "pxd.portworx.com", "volumeHandle": "ID", "fsType": "type"},
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
        }))
    );
}

// ---- what is not migrated, and where ----

#[test]
fn csi_and_other_volumes() {
    // A CSI PV is taken as it is; a plugin CSI migration does not serve is nobody's here.
    let csi = translate_persistent_volume(&pv(json!({
        "metadata": {"name": "pv-csi"},
        "spec": {"csi": {"driver": "hostpath.csi.k8s.io", "volumeHandle": "h"}},
    })))
    .unwrap()
    .unwrap();
    assert_eq!(csi.plugin(), None);
    assert_eq!(csi.unique_name(), "kubernetes.io/csi/hostpath.csi.k8s.io^h");
    let nfs =
        pv(json!({"metadata": {"name": "pv-nfs"}, "spec": {"nfs": {"server": "s", "path": "/"}}}));
    assert_eq!(translate_persistent_volume(&nfs), Ok(None));
    // kubernetes util_test.go, Test_CreateVolumeSpec, "inline volume type that does not support
    // csi migration" (hostPath); and a claim, which is resolved through its PV instead.
    let host_path = inline(json!({"name": "v", "hostPath": {"path": "/var/run/kmsplugin"}}));
    assert_eq!(translate_inline_volume(&host_path, "ns"), Ok(None));
    let claim = inline(json!({"name": "v", "persistentVolumeClaim": {"claimName": "c"}}));
    assert_eq!(translate_inline_volume(&claim, "ns"), Ok(None));
}

#[test]
fn migration_on_a_node_follows_its_csinode() {
    // kubernetes pkg/controller/volume/attachdetach/util/util.go, isCSIMigrationSupportedOnNode.
    let csi_node = |annotation: Option<&str>, drivers: &[&str]| -> CSINode {
        let mut object = json!({
            "metadata": {"name": "node-a"},
            "spec": {"drivers": drivers.iter().map(|d| json!({"name": d, "nodeID": "id"})).collect::<Vec<_>>()},
        });
        if let Some(annotation) = annotation {
            object["metadata"]["annotations"] = json!({MIGRATED_PLUGINS_ANNOTATION: annotation});
        }
        serde_json::from_value(object).unwrap()
    };
    let migration = CsiMigration::default();
    let portworx = InTreePlugin::Portworx;
    let node = |annotation, drivers| MigratedNode::of(&csi_node(annotation, drivers));
    // Complete plugins need no CSINode at all.
    for plugin in InTreePlugin::ALL {
        if plugin != portworx {
            assert_eq!(migration.on_node(plugin, None), Ok(true), "{plugin:?}");
        }
    }
    // Portworx: only where the annotation lists it and its driver is installed.
    assert_eq!(
        migration.on_node(portworx, None),
        Err(NodeMigrationError::NoCsiNode {
            plugin: "kubernetes.io/portworx-volume"
        })
    );
    assert_eq!(
        migration.on_node(portworx, Some(&node(None, &["pxd.portworx.com"]))),
        Ok(false)
    );
    let listed = "kubernetes.io/aws-ebs,kubernetes.io/portworx-volume";
    assert_eq!(
        migration.on_node(portworx, Some(&node(Some(listed), &["pxd.portworx.com"]))),
        Ok(true)
    );
    assert_eq!(
        migration.on_node(portworx, Some(&node(Some(listed), &[]))),
        Err(NodeMigrationError::DriverMissing {
            plugin: "kubernetes.io/portworx-volume",
            driver: "pxd.portworx.com"
        })
    );
    // The pieces are compared as they are, as upstream's split does.
    let spaced = "kubernetes.io/aws-ebs, kubernetes.io/portworx-volume";
    assert_eq!(
        migration.on_node(portworx, Some(&node(Some(spaced), &["pxd.portworx.com"]))),
        Ok(false)
    );
    // With InTreePluginPortworxUnregister on, every plugin's migration is complete.
    let all = CsiMigration::complete(InTreePlugin::ALL);
    assert_eq!(all.on_node(portworx, None), Ok(true));
}
