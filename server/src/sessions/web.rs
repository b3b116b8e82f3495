//! Web pages as session context (issue #60.2, seed 003: "fetch URL content with basic
//! readability extraction and size limits; summarize/trim before passing to model").
//!
//! A page is fetched **once, when it is pinned**, and its readable text is kept in the session
//! (journaled with it). So a refusal or a failure is the answer to the pin itself, while the
//! user is there to read it, and never a run that starts without what the user asked for; every
//! run of the session sees the same text, the one the user could look at (`GET /sessions/:id`);
//! and no run waits on, or depends on, the network. A page that changed is pinned again.
//!
//! The fetch is hostile input handled with care: only hosts of `[context] url_hosts` (empty by
//! default: nothing is fetched until the user allows a host), every redirect followed by hand
//! and its target checked against the same list, the body read at most to `url_max_bytes`
//! (refused past it), one deadline over the whole fetch, only text and HTML taken. HTML becomes
//! its readable text through `dom_smoothie` (a maintained, pure-Rust port of Mozilla's
//! Readability, the extraction Firefox's reader view uses; it keeps the article and drops
//! navigation, scripts and boilerplate, and bounds the elements it parses); the text has its
//! secret-looking strings redacted ([`crate::model::redact`]) and is cut to `url_max_text`.

use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use reqwest::Url;

use crate::config::context::UrlPolicy;
use crate::error::AppError;
use crate::hub::Hub;
use crate::model::now;
use crate::model::session::{ContextKind, ContextRow, Entry, SessionRec};
use crate::protocol::ErrorCode;

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 5;
/// Elements of a page parsed at most (a page with more is refused, not parsed).
const MAX_ELEMENTS: usize = 100_000;
/// Fetches at a time, so that pins sent at once hold at most this many bodies
/// (`url_max_bytes` each) and extractions; the others wait their turn.
const MAX_FETCHES: usize = 4;

static FETCHES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_FETCHES);

/// Why a page was not pinned.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    BadUrl(String),
    #[error("{url}: the host {host} is not in [context] url_hosts of the hub's config; add {rule:?} there to allow it")]
    NotAllowed {
        url: String,
        host: String,
        rule: String,
    },
    #[error("{from} redirects to {to}, whose host {host} is not in [context] url_hosts; pin {to} itself once its host is allowed")]
    RedirectNotAllowed {
        from: String,
        to: String,
        host: String,
    },
    #[error("{from} redirects to {to}, which is not an http(s) page")]
    RedirectNotWeb { from: String, to: String },
    #[error("{0}: more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects(String),
    #[error("{url}: the server answered {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: the page is over {max} bytes ([context] url_max_bytes)")]
    TooLarge { url: String, max: u64 },
    #[error("{url}: the page is {kind}, not text or HTML")]
    NotText { url: String, kind: String },
    #[error("{url}: no readable text in the page ({why})")]
    NoText { url: String, why: String },
    #[error("{url}: {why}")]
    Network { url: String, why: String },
}

impl From<FetchError> for AppError {
    fn from(e: FetchError) -> AppError {
        match e {
            FetchError::BadUrl(_) => AppError::bad_request(e.to_string()),
            FetchError::NotAllowed { .. }
            | FetchError::RedirectNotAllowed { .. }
            | FetchError::RedirectNotWeb { .. } => {
                AppError::refused(ErrorCode::UrlRefused, e.to_string())
            }
            _ => AppError::bad_gateway(ErrorCode::FetchFailed, e.to_string()),
        }
    }
}

/// A page's text as it is pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Where the text came from, after redirects.
    pub url: String,
    /// The text kept: the title, then the readable text, at most `url_max_text` bytes.
    pub text: String,
    /// Bytes of text left out to fit.
    pub cut: usize,
}

/// The URL a `url` row asks for: http(s), absolute, and nothing the hub fills itself.
pub fn requested_url(row: &ContextRow) -> Result<Url, AppError> {
    let bad = |m: String| Err(AppError::bad_request(format!("context row: {m}")));
    if row.content.is_some() || row.fetched_at.is_some() {
        return bad(
            "a \"url\" row takes no content or fetched_at: the hub fetches the page".into(),
        );
    }
    let Some(raw) = row.url.as_deref() else {
        return bad("kind \"url\" needs url".into());
    };
    match Url::parse(raw.trim()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(u),
        Ok(_) => bad(format!(
            "{raw:?}: only http:// and https:// pages can be pinned"
        )),
        Err(e) => bad(format!("{raw:?} is not a URL: {e}")),
    }
}

/// Whether `url` may be fetched: `from` is the page that redirected to it, if any.
fn check(policy: &UrlPolicy, url: &Url, from: Option<&Url>) -> Result<(), FetchError> {
    let host = url.host_str().unwrap_or_default().to_string();
    let port = url.port_or_known_default().unwrap_or(0);
    let web = matches!(url.scheme(), "http" | "https");
    if web && policy.allows(&host, port) {
        return Ok(());
    }
    Err(match from {
        Some(f) if !web => FetchError::RedirectNotWeb {
            from: f.to_string(),
            to: url.to_string(),
        },
        Some(f) => FetchError::RedirectNotAllowed {
            from: f.to_string(),
            to: url.to_string(),
            host,
        },
        None => FetchError::NotAllowed {
            url: url.to_string(),
            rule: match url.port() {
                Some(p) => format!("{host}:{p}"),
                None => host.clone(),
            },
            host,
        },
    })
}

/// How a page's body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Html,
    Text,
}

/// The kind of body a `Content-Type` announces; None for one that is not text.
fn body_kind(content_type: Option<&str>) -> Option<Body> {
    let Some(ct) = content_type else {
        return Some(Body::Html); // Unlabelled: read as HTML, which takes plain text too.
    };
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "text/html" | "application/xhtml+xml" => Some(Body::Html),
        "application/json" | "application/xml" => Some(Body::Text),
        m if m.starts_with("text/") => Some(Body::Text),
        _ => None,
    }
}

/// Fetch `url` under `policy` and make its text ready to pin.
pub async fn fetch(policy: &UrlPolicy, url: &Url) -> Result<Page, FetchError> {
    // Never closed: the semaphore lives as long as the process.
    let _turn = FETCHES.acquire().await;
    let net = |u: &Url, e: reqwest::Error| FetchError::Network {
        url: u.to_string(),
        why: crate::error::error_chain(&e),
    };
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(policy.timeout)
        .user_agent(concat!("hunkgate/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| net(url, e))?;
    let fetched = tokio::time::timeout(policy.timeout, follow(&client, policy, url.clone())).await;
    let (at, kind, body) = match fetched {
        Ok(r) => r?,
        Err(_) => {
            return Err(FetchError::Network {
                url: url.to_string(),
                why: format!(
                    "no answer within {}s ([context] url_timeout_secs)",
                    policy.timeout.as_secs()
                ),
            })
        }
    };
    let max_text = policy.max_text;
    let at2 = at.clone();
    tokio::task::spawn_blocking(move || page_text(&at2, kind, &body, max_text))
        .await
        .map_err(|e| FetchError::NoText {
            url: at.to_string(),
            why: e.to_string(),
        })?
}

/// Follow `url`'s redirects by hand, each target checked, to the page itself: its URL, how to
/// read it, and its body (at most `max_bytes`).
async fn follow(
    client: &reqwest::Client,
    policy: &UrlPolicy,
    mut at: Url,
) -> Result<(Url, Body, Vec<u8>), FetchError> {
    let mut from: Option<Url> = None;
    for _ in 0..=MAX_REDIRECTS {
        check(policy, &at, from.as_ref())?;
        let resp = client
            .get(at.clone())
            .header(ACCEPT, "text/html, text/plain;q=0.9, */*;q=0.1")
            .send()
            .await
            .map_err(|e| FetchError::Network {
                url: at.to_string(),
                why: crate::error::error_chain(&e),
            })?;
        let status = resp.status();
        if status.is_redirection() {
            let next = resp
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| at.join(l).ok())
                .ok_or_else(|| FetchError::Status {
                    url: at.to_string(),
                    status: status.as_u16(),
                })?;
            from = Some(std::mem::replace(&mut at, next));
            continue;
        }
        if !status.is_success() {
            return Err(FetchError::Status {
                url: at.to_string(),
                status: status.as_u16(),
            });
        }
        let ct = resp
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let Some(kind) = body_kind(ct.as_deref()) else {
            return Err(FetchError::NotText {
                url: at.to_string(),
                kind: ct.unwrap_or_default(),
            });
        };
        let body = read_capped(resp, &at, policy.max_bytes).await?;
        return Ok((at, kind, body));
    }
    Err(FetchError::TooManyRedirects(at.to_string()))
}

/// The body, refused as soon as it is known to be over `max` bytes (announced or streamed).
async fn read_capped(
    mut resp: reqwest::Response,
    url: &Url,
    max: u64,
) -> Result<Vec<u8>, FetchError> {
    let too_large = || FetchError::TooLarge {
        url: url.to_string(),
        max,
    };
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                if body.len() as u64 + c.len() as u64 > max {
                    return Err(too_large());
                }
                body.extend_from_slice(&c);
            }
            Ok(None) => return Ok(body),
            Err(e) => {
                return Err(FetchError::Network {
                    url: url.to_string(),
                    why: crate::error::error_chain(&e),
                })
            }
        }
    }
}

/// The text to pin of a page's `body`: readable, redacted, cut to `max_text` bytes.
fn page_text(url: &Url, kind: Body, body: &[u8], max_text: usize) -> Result<Page, FetchError> {
    let raw = String::from_utf8_lossy(body);
    let no_text = |why: String| FetchError::NoText {
        url: url.to_string(),
        why,
    };
    let (title, text) = match kind {
        Body::Text => (String::new(), raw.into_owned()),
        Body::Html => readable(&raw, url.as_str()).map_err(no_text)?,
    };
    let text = tidy(&text);
    if text.trim().is_empty() {
        return Err(no_text("it is empty".into()));
    }
    let mut whole = if title.trim().is_empty() {
        text
    } else {
        format!("# {}\n\n{text}", title.trim())
    };
    whole = crate::model::redact::redacted(&whole);
    let (text, cut) = cut_to(&whole, max_text);
    Ok(Page {
        url: url.to_string(),
        text,
        cut,
    })
}

/// The title and readable text of an HTML page: its paragraphs, lists and code as lines of
/// plain text. (Not Markdown, whose escapes — `ghp\_…` — would hide a secret from the
/// redaction.)
fn readable(html: &str, url: &str) -> Result<(String, String), String> {
    let cfg = dom_smoothie::Config {
        max_elements_to_parse: MAX_ELEMENTS,
        text_mode: dom_smoothie::TextMode::Formatted,
        ..dom_smoothie::Config::default()
    };
    let mut r =
        dom_smoothie::Readability::new(html, Some(url), Some(cfg)).map_err(|e| e.to_string())?;
    let article = r.parse().map_err(|e| e.to_string())?;
    Ok((article.title, article.text_content.to_string()))
}

/// Trailing spaces off every line, and no more than one blank line in a row.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        blank = if line.is_empty() { blank + 1 } else { 0 };
        if blank <= 1 {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.trim().to_string()
}

/// `text` cut (at a line end where one is near, else a char boundary) so that it and the
/// note saying so fit in `max` bytes; and how many bytes were left out.
fn cut_to(text: &str, max: usize) -> (String, usize) {
    if text.len() <= max {
        return (text.to_string(), 0);
    }
    let note = |n: usize| format!("\n[… {n} more bytes of the page left out]");
    let room = max.saturating_sub(note(text.len()).len());
    let mut end = room.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if let Some(nl) = text[..end].rfind('\n').filter(|&nl| nl + 200 >= end) {
        end = nl;
    }
    let left = text.len() - end;
    (format!("{}{}", &text[..end], note(left)), left)
}

impl Hub {
    /// Pin the web page a `url` row names to session `id`: fetched now, its text kept in the
    /// row. The fetch, pinned or refused, is recorded in the session's history.
    pub async fn pin_url(&self, id: &str, mut row: ContextRow) -> Result<SessionRec, AppError> {
        debug_assert_eq!(row.kind, ContextKind::Url);
        let url = requested_url(&row)?;
        let sid = {
            let st = self.lock()?;
            Self::session_id(&st, id)?
        };
        let page = match fetch(&self.cfg().url_context, &url).await {
            Ok(p) => p,
            Err(e) => {
                self.session_entry(
                    &sid,
                    Entry::tool("fetch_url", url.as_str(), false, &e.to_string()),
                );
                return Err(e.into());
            }
        };
        row.url = Some(url.to_string());
        row.content = Some(page.text.clone());
        row.fetched_at = Some(now());
        let s = self.pin_context(&sid, row)?;
        let pinned = s.context.last().map(|r| r.id.as_str()).unwrap_or("");
        let mut outcome = format!("pinned as {pinned}: {} bytes of text", page.text.len());
        if page.url != url.as_str() {
            outcome.push_str(&format!(" from {}", page.url));
        }
        if page.cut > 0 {
            outcome.push_str(&format!(
                ", {} more left out ([context] url_max_text)",
                page.cut
            ));
        }
        self.session_entry(&sid, Entry::tool("fetch_url", url.as_str(), true, &outcome));
        Ok(s)
    }
}

#[cfg(test)]
#[path = "web_tests.rs"]
mod tests;
