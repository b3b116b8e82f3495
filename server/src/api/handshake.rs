//! The WebSocket opening handshake (RFC 6455 §4.2) over hyper's HTTP/1.1 upgrade, and the
//! upgraded connection as tokio-tungstenite's stream.
//!
//! The hub answers the handshake itself, rather than through axum's `WebSocketUpgrade`, to
//! hold tungstenite's stream, which sends raw frames and so a message in fragments
//! ([`crate::api::ws`]'s `FRAGMENT`). tungstenite writes every frame whole into a buffer of the
//! connection's that grows to the largest frame and never shrinks: with each event one frame, a
//! 12 MB `suggestion.ready` left 12 MB with every client connected when it was sent, for as
//! long as that client stayed.

use std::future::Future;

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use crate::error::AppError;

/// A client's WebSocket connection, once upgraded.
pub type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// The one version of the protocol there is (RFC 6455 §4.1).
const VERSION: &str = "13";

/// Check that `req` opens a WebSocket and answer it, `101 Switching Protocols`; `serve` runs on
/// the connection once hyper hands it over. A request that does not is answered with what is
/// wrong with it, and `serve` never runs.
pub fn accept<F, Fut>(mut req: Request, config: WebSocketConfig, serve: F) -> Response
where
    F: FnOnce(Socket) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let key = match check(req.method(), req.version(), req.headers()) {
        Ok(key) => key,
        Err(refused) => return refused.into_response(),
    };
    let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return Refused::Bad("this connection cannot be upgraded to a WebSocket").into_response();
    };
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let io = TokioIo::new(upgraded);
                serve(WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await).await
            }
            Err(e) => tracing::debug!(error = %e, "WebSocket upgrade failed"),
        }
    });
    let mut resp = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::SEC_WEBSOCKET_ACCEPT, key);
    resp
}

/// Why a request does not open a WebSocket.
#[derive(Debug)]
enum Refused {
    /// `400`, saying what is wrong.
    Bad(&'static str),
    /// Another version of the protocol: `426` with the one the hub speaks (RFC 6455 §4.4).
    Version,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::Bad(why) => AppError::bad_request(why.into()).into_response(),
            Refused::Version => {
                let mut resp = AppError::bad_request(format!(
                    "this hub speaks WebSocket version {VERSION}: send `Sec-WebSocket-Version: {VERSION}`"
                ))
                .into_response();
                *resp.status_mut() = StatusCode::UPGRADE_REQUIRED;
                resp.headers_mut().insert(
                    header::SEC_WEBSOCKET_VERSION,
                    HeaderValue::from_static(VERSION),
                );
                resp
            }
        }
    }
}

/// The `Sec-WebSocket-Accept` value for a request that opens a WebSocket (RFC 6455 §4.2.1),
/// else why it does not.
fn check(method: &Method, version: Version, h: &HeaderMap) -> Result<HeaderValue, Refused> {
    use Refused::Bad;
    if method != Method::GET {
        return Err(Bad("a WebSocket is opened with GET"));
    }
    if version != Version::HTTP_11 {
        return Err(Bad("a WebSocket is opened over HTTP/1.1"));
    }
    if !has_token(h, header::CONNECTION, "upgrade") {
        return Err(Bad("to open a WebSocket, send `Connection: Upgrade`"));
    }
    if !has_token(h, header::UPGRADE, "websocket") {
        return Err(Bad("to open a WebSocket, send `Upgrade: websocket`"));
    }
    if h.get(header::SEC_WEBSOCKET_VERSION).map(|v| v.as_bytes()) != Some(VERSION.as_bytes()) {
        return Err(Refused::Version);
    }
    match h.get(header::SEC_WEBSOCKET_KEY).map(|k| k.as_bytes()) {
        Some(key) if is_key(key) => {
            HeaderValue::from_str(&derive_accept_key(key)).map_err(|_| Bad("bad Sec-WebSocket-Key"))
        }
        Some(_) => Err(Bad(
            "Sec-WebSocket-Key must be 16 bytes in base64 (24 characters)",
        )),
        None => Err(Bad("to open a WebSocket, send a `Sec-WebSocket-Key`")),
    }
}

/// Whether header `name` lists `token` (comma-separated, any case).
fn has_token(h: &HeaderMap, name: HeaderName, token: &str) -> bool {
    h.get_all(name).iter().any(|v| {
        v.as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// Whether `key` is 16 bytes in base64, as a client's nonce is (RFC 6455 §4.1).
fn is_key(key: &[u8]) -> bool {
    let alphabet = |b: &u8| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/';
    key.len() == 24 && key.ends_with(b"==") && key[..22].iter().all(alphabet)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    const GOOD: &[(&str, &str)] = &[
        ("connection", "keep-alive, Upgrade"),
        ("upgrade", "WebSocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    /// RFC 6455's own example (§1.3): its key gives its accept value. Each header the request
    /// needs, taken away or spoiled, refuses it with a reply that names it.
    #[test]
    fn a_request_opens_a_websocket_only_with_every_header_it_needs() {
        let accept = check(&Method::GET, Version::HTTP_11, &headers(GOOD)).unwrap();
        assert_eq!(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");

        let status = |method: Method, version: Version, h: &[(&str, &str)]| {
            check(&method, version, &headers(h))
                .unwrap_err()
                .into_response()
                .status()
        };
        let without = |name: &str| -> Vec<(&str, &str)> {
            GOOD.iter().copied().filter(|(k, _)| *k != name).collect()
        };
        let with = |name: &str, value: &'static str| -> Vec<(&str, &str)> {
            let mut h = without(name);
            h.push((GOOD.iter().find(|(k, _)| *k == name).unwrap().0, value));
            h
        };
        let bad = StatusCode::BAD_REQUEST;
        assert_eq!(status(Method::POST, Version::HTTP_11, GOOD), bad);
        assert_eq!(status(Method::HEAD, Version::HTTP_11, GOOD), bad);
        assert_eq!(status(Method::GET, Version::HTTP_10, GOOD), bad);
        for name in ["connection", "upgrade", "sec-websocket-key"] {
            assert_eq!(status(Method::GET, Version::HTTP_11, &without(name)), bad);
        }
        assert_eq!(
            status(
                Method::GET,
                Version::HTTP_11,
                &with("connection", "keep-alive")
            ),
            bad
        );
        assert_eq!(
            status(Method::GET, Version::HTTP_11, &with("upgrade", "h2c")),
            bad
        );
        for key in [
            "short==",
            "dGhlIHNhbXBsZSBub25jZQ",
            "dGhlIHNhbXBsZSBub25j!Q==",
        ] {
            assert_eq!(
                status(
                    Method::GET,
                    Version::HTTP_11,
                    &with("sec-websocket-key", key)
                ),
                bad
            );
        }
        let other = check(
            &Method::GET,
            Version::HTTP_11,
            &headers(&with("sec-websocket-version", "8")),
        )
        .unwrap_err()
        .into_response();
        assert_eq!(other.status(), StatusCode::UPGRADE_REQUIRED);
        assert_eq!(other.headers()[header::SEC_WEBSOCKET_VERSION], "13");
        // `Connection` and `Upgrade` may come as several headers too.
        let mut split = without("connection");
        split.push(("connection", "keep-alive"));
        split.push(("connection", "upgrade"));
        assert!(check(&Method::GET, Version::HTTP_11, &headers(&split)).is_ok());
    }
}
