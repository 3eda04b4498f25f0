//! The values under the layout's keys, as JSON, and the ids in keys, as text.

use std::fmt::Display;
use std::str::FromStr;
use std::sync::Arc;

use attach_detach::Domain;
use attach_detach::core::{Access, VolumeSpec};
use attach_detach::traits::{ReportedVolume, ReportedVolumes};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::DecodeError;

/// An id that can be a key's last segment: written with `Display`, read back with `FromStr`.
/// `String`, the integer types and most UUID types qualify.
pub trait KeyId: Display + FromStr {}

impl<T: Display + FromStr> KeyId for T {}

/// A [`Domain`] this adapter can keep in etcd: ids that read and write as text, and a payload
/// that serializes to JSON.
///
/// Implemented for every such domain; `Ids<String, String, String, ()>` is one.
pub trait EtcdDomain:
    Domain<Node: KeyId, Volume: KeyId, Workload: KeyId, Payload: Serialize + DeserializeOwned>
{
}

impl<D> EtcdDomain for D where
    D: Domain<Node: KeyId, Volume: KeyId, Workload: KeyId, Payload: Serialize + DeserializeOwned>
{
}

/// Parses an id out of a key or a value.
pub(crate) fn parse_id<T: KeyId>(text: &str, what: &'static str) -> Result<T, DecodeError> {
    text.parse().map_err(|_| DecodeError::Id {
        what,
        text: text.to_owned(),
    })
}

/// One entry of an `attached/{node}` value.
#[derive(Serialize, Deserialize)]
struct AttachedEntry<'a> {
    volume: std::borrow::Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device: Option<std::borrow::Cow<'a, str>>,
}

/// The controller's attached list, as written to `attached/{node}`.
pub(crate) fn encode_attached<D: EtcdDomain>(attached: &ReportedVolumes<D>) -> Vec<u8> {
    let entries: Vec<AttachedEntry<'_>> = attached
        .iter()
        .map(|(volume, device)| AttachedEntry {
            volume: volume.to_string().into(),
            device: device.map(Into::into),
        })
        .collect();
    serde_json::to_vec(&entries).expect("a list of strings serializes")
}

/// Reads an `attached/{node}` value back.
pub(crate) fn decode_attached<D: EtcdDomain>(
    value: &[u8],
) -> Result<Vec<ReportedVolume<D>>, DecodeError> {
    let entries: Vec<AttachedEntry<'_>> = serde_json::from_slice(value)?;
    entries
        .into_iter()
        .map(|e| {
            Ok(ReportedVolume {
                volume: parse_id(&e.volume, "volume")?,
                device: e.device.map(|d| Arc::from(d.as_ref())),
            })
        })
        .collect()
}

/// A list of volumes (the `in-use/{node}` value, a workload's volumes).
pub(crate) fn encode_volumes<V: KeyId>(volumes: &[V]) -> Vec<u8> {
    let texts: Vec<String> = volumes.iter().map(ToString::to_string).collect();
    serde_json::to_vec(&texts).expect("a list of strings serializes")
}

/// Reads a list of volumes back.
pub(crate) fn decode_volumes<V: KeyId>(value: &[u8]) -> Result<Vec<V>, DecodeError> {
    let texts: Vec<std::borrow::Cow<'_, str>> = serde_json::from_slice(value)?;
    texts.iter().map(|t| parse_id(t, "volume")).collect()
}

/// A `volume/{volume}` value.
#[derive(Serialize, Deserialize)]
struct VolumeValue<P> {
    access: AccessText,
    payload: P,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum AccessText {
    SingleNode,
    MultiNode,
}

pub(crate) fn encode_volume<P: Serialize>(spec: &VolumeSpec<P>) -> Vec<u8> {
    let access = match spec.access {
        Access::SingleNode => AccessText::SingleNode,
        Access::MultiNode => AccessText::MultiNode,
    };
    serde_json::to_vec(&VolumeValue {
        access,
        payload: &spec.payload,
    })
    .expect("a payload that implements Serialize serializes to JSON")
}

pub(crate) fn decode_volume<P: DeserializeOwned>(
    value: &[u8],
) -> Result<VolumeSpec<P>, DecodeError> {
    let v: VolumeValue<P> = serde_json::from_slice(value)?;
    Ok(VolumeSpec {
        access: match v.access {
            AccessText::SingleNode => Access::SingleNode,
            AccessText::MultiNode => Access::MultiNode,
        },
        payload: v.payload,
        attach_required: true,
        driver: None,
    })
}

/// A `workload/{workload}` value.
#[derive(Serialize, Deserialize)]
struct WorkloadValue {
    node: String,
    volumes: Vec<String>,
}

pub(crate) fn encode_workload<N: KeyId, V: KeyId>(node: &N, volumes: &[V]) -> Vec<u8> {
    serde_json::to_vec(&WorkloadValue {
        node: node.to_string(),
        volumes: volumes.iter().map(ToString::to_string).collect(),
    })
    .expect("strings serialize")
}

pub(crate) fn decode_workload<N: KeyId, V: KeyId>(
    value: &[u8],
) -> Result<(N, Vec<V>), DecodeError> {
    let w: WorkloadValue = serde_json::from_slice(value)?;
    let node = parse_id(&w.node, "node")?;
    let volumes = w
        .volumes
        .iter()
        .map(|v| parse_id(v, "volume"))
        .collect::<Result<_, _>>()?;
    Ok((node, volumes))
}

#[cfg(test)]
mod tests {
    use attach_detach::Ids;

    use super::*;

    type D = Ids<String, u32, String, Option<String>>;

    #[test]
    fn values_round_trip() {
        let attached: Vec<ReportedVolume<D>> = vec![
            ReportedVolume {
                volume: 3,
                device: None,
            },
            ReportedVolume {
                volume: 7,
                device: Some(Arc::from("/dev/xvdb")),
            },
        ];
        let bytes = encode_attached::<D>(&attached.clone().into());
        assert_eq!(
            bytes,
            br#"[{"volume":"3"},{"volume":"7","device":"/dev/xvdb"}]"#
        );
        assert_eq!(decode_attached::<D>(&bytes).unwrap(), attached);
        assert_eq!(
            decode_volumes::<u32>(&encode_volumes(&[1_u32, 2])).unwrap(),
            [1, 2]
        );
        let spec = VolumeSpec::multi_node(Some("handle".to_string()));
        assert_eq!(
            decode_volume::<Option<String>>(&encode_volume(&spec)).unwrap(),
            spec
        );
        let (node, volumes): (String, Vec<u32>) =
            decode_workload(&encode_workload(&"n1".to_string(), &[4_u32])).unwrap();
        assert_eq!((node.as_str(), volumes), ("n1", vec![4]));
    }

    #[test]
    fn bad_values_are_errors_that_say_what() {
        let e = decode_attached::<D>(br#"[{"volume":"x"}]"#).unwrap_err();
        assert_eq!(e.to_string(), "\"x\" is not a valid volume id");
        assert!(decode_attached::<D>(b"{").is_err());
        assert!(decode_volume::<()>(br#"{"access":"both","payload":null}"#).is_err());
    }
}
