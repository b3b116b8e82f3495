//! One error type for every handler, turned into a response in one place.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::protocol::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but the state does not allow it (a conflicting file, a decided hunk).
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String },
    #[error("{0}")]
    NoChanges(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl AppError {
    /// The machine-readable code clients switch on (documented in protocol.md).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            AppError::BadRequest(_) => ErrorCode::BadRequest,
            AppError::NotFound(_) => ErrorCode::NotFound,
            AppError::Conflict { code, .. } => *code,
            AppError::NoChanges(_) => ErrorCode::NoChanges,
            AppError::Unauthorized(_) => ErrorCode::Unauthorized,
            AppError::Forbidden(_) => ErrorCode::Forbidden,
            AppError::TooLarge(_) => ErrorCode::TooLarge,
            AppError::Internal(_) => ErrorCode::Internal,
        }
    }

    /// [`AppError::error_code`] as it is on the wire.
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    pub fn status(&self) -> StatusCode {
        match self {
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::Conflict { .. } | AppError::NoChanges(_) => StatusCode::CONFLICT,
            AppError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        if let AppError::Internal(msg) = &self {
            tracing::error!(error = %msg, "request failed");
        }
        let body = serde_json::json!({
            "success": false,
            "error": self.to_string(),
            "code": self.code(),
        });
        let mut resp = (self.status(), axum::Json(body)).into_response();
        if matches!(self, AppError::Unauthorized(_)) {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}
