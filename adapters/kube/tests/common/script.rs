//! A scripted API server: each request must be the next one the script expects (method, path
//! and query, content type, JSON body compared exactly), and gets the script's answer.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode, header};
use kube::Client;
use kube::client::Body;
use serde_json::Value;
use tokio::task::JoinHandle;
use tower_test::mock::{self, Handle};

/// The mock's two ends, as kube's own tests name them.
pub type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// A client whose requests go to the returned handle.
pub fn mock_client() -> (Client, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// One request the script expects, and its answer.
#[derive(Debug)]
pub struct Exchange {
    method: Method,
    uri: String,
    content_type: Option<&'static str>,
    body: Option<Value>,
    answer: Answer,
}

/// How the script answers.
#[derive(Debug)]
pub enum Answer {
    /// An HTTP answer with a JSON body.
    Json(u16, Value),
    /// A failure of the transport (a reset connection): no answer at all.
    Broken(&'static str),
    /// No answer for this long (with tokio's time paused, the client's timeout fires first).
    Hold(Duration),
}

impl Exchange {
    /// A GET of `uri` (path and query).
    pub fn get(uri: &str) -> Self {
        Exchange {
            method: Method::GET,
            uri: uri.to_owned(),
            content_type: None,
            body: None,
            answer: Answer::Json(200, Value::Null),
        }
    }

    /// A PATCH of `uri` with content type `content_type` and exactly `body`.
    pub fn patch(uri: &str, content_type: &'static str, body: Value) -> Self {
        Exchange {
            method: Method::PATCH,
            uri: uri.to_owned(),
            content_type: Some(content_type),
            body: Some(body),
            answer: Answer::Json(200, Value::Null),
        }
    }

    /// Answered with `code` and `body`.
    pub fn answer(mut self, code: u16, body: Value) -> Self {
        self.answer = Answer::Json(code, body);
        self
    }

    /// Answered with `answer`.
    pub fn then(mut self, answer: Answer) -> Self {
        self.answer = answer;
        self
    }
}

/// A client served by `script`, and the task that plays it. Await the task after dropping
/// every clone of the client: it then also checks that no request came after the script.
pub fn scripted(script: Vec<Exchange>) -> (Client, JoinHandle<()>) {
    let (client, mut handle) = mock_client();
    let task = tokio::spawn(async move {
        for (step, expected) in script.into_iter().enumerate() {
            let (request, respond) = handle
                .next_request()
                .await
                .unwrap_or_else(|| panic!("step {step}: no request came, expected {expected:?}"));
            let (parts, body) = request.into_parts();
            let what = format!("step {step}: {} {}", parts.method, parts.uri);
            assert_eq!(parts.method, expected.method, "{what}");
            assert_eq!(parts.uri.to_string(), expected.uri, "{what}");
            let content_type = parts
                .headers
                .get(header::CONTENT_TYPE)
                .map(|v| v.to_str().expect("ASCII content type"));
            if let Some(expected_type) = expected.content_type {
                assert_eq!(content_type, Some(expected_type), "{what}");
            }
            let bytes = body.collect_bytes().await.expect("request body");
            match &expected.body {
                Some(expected_body) => {
                    let sent: Value = serde_json::from_slice(&bytes)
                        .unwrap_or_else(|e| panic!("{what}: body not JSON: {e}"));
                    assert_eq!(&sent, expected_body, "{what}");
                }
                None => assert!(bytes.is_empty(), "{what}: unexpected body"),
            }
            match expected.answer {
                Answer::Json(code, body) => respond.send_response(json_response(code, &body)),
                Answer::Broken(message) => respond.send_error(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    message,
                )),
                Answer::Hold(duration) => {
                    tokio::time::sleep(duration).await;
                    drop(respond);
                }
            }
        }
        // Every client is gone: no request may be left.
        if let Some((request, _)) = handle.next_request().await {
            panic!(
                "a request after the script: {} {}",
                request.method(),
                request.uri()
            );
        }
    });
    (client, task)
}

/// An HTTP answer with a JSON body.
pub fn json_response(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).expect("a status code"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("JSON")))
        .expect("a response")
}
