//! The hub's HTTP client, shared by the reviewer's CLI commands, the agent's `publish` / `status`
//! and `hunkgate mcp`: one place that knows how to reach the hub and what its errors look like.

use std::time::Duration;

use serde_json::Value;

/// Set by the hub in every agent's environment: where the hub is.
pub const URL_VAR: &str = "HUNKGATE_URL";
/// Set by the hub in every agent's environment: the run's agent token (only `/agent/*`).
pub const TOKEN_VAR: &str = "HUNKGATE_AGENT_TOKEN";

/// The hub is local; a connection that takes longer than this is not going to happen. There is no
/// overall timeout: publishing snapshots the sandbox, which may legitimately take a while.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A hub error body is shown to people; a non-JSON one (a proxy's HTML page) is cut to this.
const ERROR_SNIPPET: usize = 300;

pub type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Outside an agent run: the hub sets both variables for the agent, nobody else does.
    #[error("{} not set: this is for an agent inside a hunkgate run, where the hub sets {URL_VAR} and {TOKEN_VAR}", missing_list(.missing))]
    MissingEnv { missing: Vec<&'static str> },
    /// No hub was found where one was looked for (the message says where, and why not).
    #[error("{0}")]
    NoHub(String),
    #[error("invalid hub URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("the token is not a valid HTTP header value")]
    BadToken,
    #[error("cannot build the HTTP client")]
    Build(#[source] reqwest::Error),
    #[error("cannot reach the hub at {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the request to the hub at {url} could not be made")]
    Request {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("reading the hub's answer from {url}")]
    Read {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// A 2xx answer that is not JSON: not a hunkgate hub, or a broken one.
    #[error("the hub's answer (HTTP {status}) is not JSON: {detail}")]
    BadAnswer { status: u16, detail: String },
    /// The hub said no: `message` is its `error`, `code` its machine-readable `code`.
    #[error("{message}")]
    Hub {
        status: u16,
        code: String,
        message: String,
    },
    #[error("WebSocket connection to {url}")]
    WebSocket {
        url: String,
        #[source]
        source: Box<tokio_tungstenite::tungstenite::Error>,
    },
}

/// `A is` / `A and B are`: the variables that are not set, as the start of a sentence.
pub fn missing_list(missing: &[&str]) -> String {
    match missing {
        [one] => format!("{one} is"),
        many => format!("{} are", many.join(" and ")),
    }
}

/// A client for one hub with one token (the reviewer's or a run's agent token).
pub struct HubClient {
    http: reqwest::Client,
    /// Without a trailing slash, so `{url}{path}` is the endpoint.
    url: String,
    base: reqwest::Url,
    token: String,
}

impl HubClient {
    pub fn new(url: &str, token: impl Into<String>) -> Result<Self, ClientError> {
        let trimmed = url.trim_end_matches('/');
        let bad = |reason: String| ClientError::BadUrl {
            url: url.to_string(),
            reason,
        };
        let base = reqwest::Url::parse(trimmed).map_err(|e| bad(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(bad("expected http://host:port".into()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(ClientError::Build)?;
        Ok(Self {
            http,
            url: trimmed.to_string(),
            base,
            token: token.into(),
        })
    }

    /// The agent's client: URL and token from the environment the hub gave the agent.
    pub fn for_agent() -> Result<Self, ClientError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        match (var(URL_VAR), var(TOKEN_VAR)) {
            (Some(url), Some(token)) => Self::new(&url, token),
            (url, token) => Err(ClientError::MissingEnv {
                missing: [(URL_VAR, url.is_none()), (TOKEN_VAR, token.is_none())]
                    .into_iter()
                    .filter_map(|(k, missing)| missing.then_some(k))
                    .collect(),
            }),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// `GET {url}{path}`; `path` is used as written (`/suggestions?all=true`).
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        let req = self.http.get(format!("{}{path}", self.url));
        self.send(req).await
    }

    /// `POST {url}{path}` with a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> Result<Value, ClientError> {
        let req = self.http.post(format!("{}{path}", self.url)).json(&body);
        self.send(req).await
    }

    /// `GET` of an endpoint built from path segments and query pairs, each escaped, so that an id
    /// a model made up (`../x?y`) stays one segment.
    pub async fn get_at(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
    ) -> Result<Value, ClientError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| ClientError::BadUrl {
                url: self.url.clone(),
                reason: "expected http://host:port".into(),
            })?
            .pop_if_empty()
            .extend(segments);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let req = self.http.get(url);
        self.send(req).await
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|source| {
                let url = self.url.clone();
                if source.is_builder() {
                    ClientError::Request { url, source }
                } else {
                    ClientError::Unreachable { url, source }
                }
            })?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|source| ClientError::Read {
            url: self.url.clone(),
            source,
        })?;
        let parsed = serde_json::from_slice::<Value>(&body);
        if status.is_success() {
            return parsed.map_err(|e| ClientError::BadAnswer {
                status: status.as_u16(),
                detail: e.to_string(),
            });
        }
        let (code, message) = match parsed {
            Ok(v) => (
                v["code"].as_str().unwrap_or_default().to_string(),
                v["error"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("request failed ({status})")),
            ),
            Err(_) => {
                let text = String::from_utf8_lossy(&body);
                let text: String = text.trim().chars().take(ERROR_SNIPPET).collect();
                let message = if text.is_empty() {
                    format!("request failed ({status})")
                } else {
                    format!("request failed ({status}): {text}")
                };
                (String::new(), message)
            }
        };
        Err(ClientError::Hub {
            status: status.as_u16(),
            code,
            message,
        })
    }

    /// The hub's event stream (`/ws`), authenticated with this client's token.
    pub async fn websocket(&self) -> Result<WsStream, ClientError> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let ws_url = format!("{}/ws", self.url.replacen("http", "ws", 1));
        let ws_err = |source| ClientError::WebSocket {
            url: ws_url.clone(),
            source: Box::new(source),
        };
        let mut req = ws_url.as_str().into_client_request().map_err(ws_err)?;
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {}", self.token)
                .parse()
                .map_err(|_| ClientError::BadToken)?,
        );
        let (ws, _) =
            tokio_tungstenite::connect_async_with_config(req, Some(crate::api::ws::config()), true)
                .await
                .map_err(ws_err)?;
        Ok(ws)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_up_front() {
        assert!(HubClient::new("http://127.0.0.1:4097/", "t").is_ok());
        assert_eq!(
            HubClient::new("http://127.0.0.1:4097/", "t")
                .map(|c| c.url().to_string())
                .ok(),
            Some("http://127.0.0.1:4097".to_string())
        );
        for bad in ["127.0.0.1:4097", "", "mailto:x@example.com", "ftp://h/"] {
            assert!(
                matches!(HubClient::new(bad, "t"), Err(ClientError::BadUrl { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn missing_variables_are_named() {
        let e = ClientError::MissingEnv {
            missing: vec![TOKEN_VAR],
        };
        assert!(
            e.to_string().starts_with("HUNKGATE_AGENT_TOKEN is not set"),
            "{e}"
        );
        let e = ClientError::MissingEnv {
            missing: vec![URL_VAR, TOKEN_VAR],
        };
        assert!(
            e.to_string()
                .starts_with("HUNKGATE_URL and HUNKGATE_AGENT_TOKEN are not set"),
            "{e}"
        );
    }
}
