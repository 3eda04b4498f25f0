//! What `/explain` asks, and how its query and `Accept` header are read.

use async_trait::async_trait;

/// An answer of `/explain`: the same facts as lines for a person and as JSON for a tool.
#[derive(Clone, Debug, PartialEq)]
pub struct Explained {
    /// One line per answer (`text/plain`, each ended by a newline).
    pub lines: Vec<String>,
    /// The answer as JSON (`application/json`).
    pub json: serde_json::Value,
}

/// Why `/explain` has no answer; each kind has its status code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExplainError {
    /// Nothing of that name is known: 404.
    #[error("not found: {0}")]
    NotFound(String),
    /// No answer now, but maybe later or from another replica (a standby, a controller that
    /// stopped or is still recovering): 503.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The explainer failed: 500.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The answers of `/explain`, from the embedder's controller.
#[async_trait]
pub trait Explainer: Send + Sync + 'static {
    /// Why `volume` is attached where it is, or not, or waiting.
    async fn explain_volume(&self, volume: &str) -> Result<Explained, ExplainError>;

    /// Why the volumes of the pod `namespace/name` are where they are.
    async fn explain_pod(&self, namespace: &str, name: &str) -> Result<Explained, ExplainError>;
}

/// What `/explain` was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Question {
    Volume(String),
    Pod { namespace: String, name: String },
}

const USAGE: &str = "ask /explain?volume=NAME or /explain?pod=NAMESPACE/NAME";

/// Reads `/explain`'s query (percent-decoded): exactly one of `volume` and `pod`, once, not
/// empty, a pod as `namespace/name`. The error is the message of a 400.
pub(crate) fn question(query: Option<&str>) -> Result<Question, String> {
    let mut volume = None;
    let mut pod = None;
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let slot = match key.as_ref() {
            "volume" => &mut volume,
            "pod" => &mut pod,
            other => return Err(format!("unknown parameter {other:?}: {USAGE}")),
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(format!("{key:?} given twice: {USAGE}"));
        }
    }
    match (volume, pod) {
        (Some(_), Some(_)) => Err(format!("both volume and pod given: {USAGE}")),
        (None, None) => Err(format!("nothing asked: {USAGE}")),
        (Some(volume), None) if volume.is_empty() => Err(format!("an empty volume: {USAGE}")),
        (Some(volume), None) => Ok(Question::Volume(volume)),
        (None, Some(pod)) => match pod.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(Question::Pod {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(format!("pod {pod:?} is not NAMESPACE/NAME: {USAGE}")),
        },
    }
}

/// Whether an `Accept` header asks for JSON: it names `application/json` with a weight above 0
/// and not below `text/plain`'s, if it names that too. Anything else (no header, `*/*`, a
/// header that cannot be read) gets text.
pub(crate) fn wants_json(accept: Option<&str>) -> bool {
    let mut json = None::<f32>;
    let mut text = None::<f32>;
    for range in accept.unwrap_or("").split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let weight = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        let slot = if media.eq_ignore_ascii_case("application/json") {
            &mut json
        } else if media.eq_ignore_ascii_case("text/plain") {
            &mut text
        } else {
            continue;
        };
        *slot = Some(slot.map_or(weight, |w| w.max(weight)));
    }
    match json {
        Some(json) => json > 0.0 && json >= text.unwrap_or(0.0),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_or_a_pod_and_nothing_else() {
        assert_eq!(
            question(Some("volume=kubernetes.io%2Fcsi%2Febs%5Evol-1")),
            Ok(Question::Volume("kubernetes.io/csi/ebs^vol-1".into()))
        );
        assert_eq!(
            question(Some("pod=default/web-0")),
            Ok(Question::Pod {
                namespace: "default".into(),
                name: "web-0".into()
            })
        );
        for bad in [
            None,
            Some(""),
            Some("volume="),
            Some("volume=a&pod=b/c"),
            Some("volume=a&volume=b"),
            Some("pod=web-0"),
            Some("pod=/web-0"),
            Some("pod=default/"),
            Some("pod=a/b/c"),
            Some("node=n"),
        ] {
            assert!(question(bad).is_err(), "{bad:?} is refused");
        }
    }

    #[test]
    fn json_only_when_asked_for_at_least_as_much_as_text() {
        assert!(wants_json(Some("application/json")));
        assert!(wants_json(Some("text/plain;q=0.5, application/json")));
        assert!(wants_json(Some("application/json, text/plain, */*")));
        assert!(!wants_json(None));
        assert!(!wants_json(Some("*/*")));
        assert!(!wants_json(Some("text/plain, application/json;q=0.9")));
        assert!(!wants_json(Some("application/json;q=0")));
    }
}
