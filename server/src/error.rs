//! One error type for every handler, turned into a reply in one place.
//!
//! An [`AppError`] is `{ kind, code, message, source }`:
//! - `kind` decides the HTTP status (and nothing else);
//! - `code` is what clients switch on ([`ErrorCode`], every code in one enum in `protocol`);
//! - `message` is for the person at the client: it names the resource and the fix;
//! - `source` is the underlying error (an `io::Error`, a git failure…). It is kept for the
//!   hub's log and never sent: [`AppError::report`] logs the whole chain, once, where the error
//!   becomes a reply (the REST response and the WebSocket answer both go through it).
//!
//! May import: `protocol`.

use std::error::Error as StdError;
use std::fmt;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::protocol::ErrorCode;

/// What went wrong, as far as the HTTP status goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request is malformed or not allowed as sent.
    BadRequest,
    /// No such resource.
    NotFound,
    /// The request is valid but the state does not allow it (a conflicting file, a decided
    /// hunk, a run that changed nothing).
    Conflict,
    Unauthorized,
    Forbidden,
    TooLarge,
    /// Something the hub fetched for the client failed (a web page to pin).
    BadGateway,
    /// The hub failed; its log has the cause.
    Internal,
}

type Source = Box<dyn StdError + Send + Sync + 'static>;

pub struct AppError {
    kind: Kind,
    code: ErrorCode,
    message: String,
    source: Option<Source>,
}

impl AppError {
    fn new(kind: Kind, code: ErrorCode, message: String) -> Self {
        AppError {
            kind,
            code,
            message,
            source: None,
        }
    }

    pub fn bad_request(message: String) -> Self {
        Self::new(Kind::BadRequest, ErrorCode::BadRequest, message)
    }

    pub fn not_found(message: String) -> Self {
        Self::new(Kind::NotFound, ErrorCode::NotFound, message)
    }

    /// A state conflict with its specific code (`conflict`, `already_decided`, `closed`…).
    pub fn conflict(code: ErrorCode, message: String) -> Self {
        Self::new(Kind::Conflict, code, message)
    }

    /// The run changed nothing.
    pub fn no_changes(message: String) -> Self {
        Self::new(Kind::Conflict, ErrorCode::NoChanges, message)
    }

    pub fn unauthorized(message: String) -> Self {
        Self::new(Kind::Unauthorized, ErrorCode::Unauthorized, message)
    }

    pub fn forbidden(message: String) -> Self {
        Self::new(Kind::Forbidden, ErrorCode::Forbidden, message)
    }

    pub fn too_large(message: String) -> Self {
        Self::new(Kind::TooLarge, ErrorCode::TooLarge, message)
    }

    /// A fetch made for the client failed (`code` says how), e.g. a web page to pin.
    pub fn bad_gateway(code: ErrorCode, message: String) -> Self {
        Self::new(Kind::BadGateway, code, message)
    }

    /// A request refused for what it names, with its specific code (`url_refused`).
    pub fn refused(code: ErrorCode, message: String) -> Self {
        Self::new(Kind::Forbidden, code, message)
    }

    /// The hub failed. `message` says what it was doing, in words for the user; attach the
    /// cause with [`AppError::with_source`] (it goes to the log, not to the client).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Kind::Internal, ErrorCode::Internal, message.into())
    }

    /// `internal` for a failed operation: the usual way to turn an I/O or library error into
    /// one, e.g. `.map_err(|e| AppError::failed("writing the feedback log", e))`. The client
    /// reads what failed and the error's own one-line text ("No space left on device (os error
    /// 28)": that is the fix); the source's chain below it is for the log only.
    pub fn failed(doing: &str, source: impl Into<Source>) -> Self {
        let source = source.into();
        Self::internal(format!("{doing}: {source}")).with_source(source)
    }

    /// Keep the underlying error (logged by [`AppError::report`], never sent).
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The same error with its client message reworded (kind, code and source kept): for a
    /// caller that knows more of what the failure means, e.g. "…; nothing was changed".
    pub fn map_message(mut self, f: impl FnOnce(String) -> String) -> Self {
        self.message = f(self.message);
        self
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The machine-readable code clients switch on (documented in protocol.md).
    pub fn error_code(&self) -> ErrorCode {
        self.code
    }

    /// [`AppError::error_code`] as it is on the wire.
    pub fn code(&self) -> &'static str {
        self.code.as_str()
    }

    /// The message for the client: never the source chain.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn status(&self) -> StatusCode {
        match self.kind {
            Kind::BadRequest => StatusCode::BAD_REQUEST,
            Kind::NotFound => StatusCode::NOT_FOUND,
            Kind::Conflict => StatusCode::CONFLICT,
            Kind::Unauthorized => StatusCode::UNAUTHORIZED,
            Kind::Forbidden => StatusCode::FORBIDDEN,
            Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Kind::BadGateway => StatusCode::BAD_GATEWAY,
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Log the error with its whole source chain, once: called where the error becomes a
    /// reply. A hub failure is an `error`; a client's mistake with a cause attached (a conflict
    /// found by reading a file) is a `debug` line; a plain client mistake is not logged.
    pub fn report(&self) {
        let chain = self.source.as_deref().map(|s| error_chain(s));
        match (self.kind, chain) {
            (Kind::Internal, chain) => tracing::error!(
                code = self.code(),
                cause = chain.as_deref().unwrap_or("-"),
                "{}",
                self.message
            ),
            (_, Some(chain)) => {
                tracing::debug!(code = self.code(), cause = %chain, "{}", self.message)
            }
            (_, None) => {}
        }
    }
}

impl fmt::Display for AppError {
    /// The client's message; the source is not part of it (see [`AppError::report`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("AppError");
        d.field("kind", &self.kind)
            .field("code", &self.code)
            .field("message", &self.message);
        if let Some(s) = &self.source {
            d.field("source", &error_chain(s.as_ref()));
        }
        d.finish()
    }
}

impl StdError for AppError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        self.report();
        let body = serde_json::json!({
            "success": false,
            "error": self.message,
            "code": self.code(),
        });
        let mut resp = (self.status(), axum::Json(body)).into_response();
        if self.kind == Kind::Unauthorized {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

/// An error and its sources, one after another (`a: b: c`).
pub fn error_chain(e: &dyn StdError) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_err() -> std::io::Error {
        std::io::Error::other("disk on fire")
    }

    #[test]
    fn the_source_is_kept_for_the_log_and_never_sent() {
        let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device");
        let e = AppError::failed("writing the feedback log", io);
        assert_eq!(e.code(), "internal");
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        // The client reads what failed and why, in one line.
        assert_eq!(
            e.to_string(),
            "writing the feedback log: No space left on device"
        );
        // Deeper causes go to the log only.
        #[derive(Debug, thiserror::Error)]
        #[error("reading the base tree")]
        struct Outer(#[source] std::io::Error);
        let deep = AppError::failed("rolling back", Outer(io_err()));
        assert_eq!(deep.to_string(), "rolling back: reading the base tree");
        assert!(error_chain(&deep).ends_with(": reading the base tree: disk on fire"));
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn kinds_give_statuses_and_conflicts_keep_their_code() {
        let e = AppError::conflict(ErrorCode::AlreadyDecided, "decided".into());
        assert_eq!(
            (e.status(), e.code()),
            (StatusCode::CONFLICT, "already_decided")
        );
        let e = AppError::no_changes("nothing".into());
        assert_eq!((e.status(), e.code()), (StatusCode::CONFLICT, "no_changes"));
        assert!(e.source().is_none());
        let e = AppError::unauthorized("token".into()).into_response();
        assert_eq!(e.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(e.headers()["www-authenticate"], "Bearer");
    }
}
