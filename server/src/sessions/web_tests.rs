//! Fetching and extracting pages, against a real HTTP server on 127.0.0.1 in this process.

use std::time::Duration;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use super::*;
use crate::config::context::HostRule;

const ARTICLE: &str = r#"<!doctype html><html><head><title>Widget guide</title>
<script>var tracking = "SCRIPT-NOISE";</script></head><body>
<nav><a href="/">Home</a> <a href="/x">NAV-NOISE</a></nav>
<article><h1>Widget guide</h1>
<p>Widgets are configured with a frobnication factor, which must be a prime number below one
hundred. The factor is read once, when the widget starts, and never again.</p>
<p>To change the factor, stop the widget, edit widget.toml, and start it again. The widget
refuses a factor that is not prime and says which primes are near the one it was given.</p>
<p>Token for the demo: ghp_abcdefghijklmnopqrstuvwxyz0123456789 (never share it).</p>
</article><footer>FOOTER-NOISE copyright</footer></body></html>"#;

/// A server on 127.0.0.1 with a page, redirects, large bodies and a non-text body; its port.
async fn server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let to = move |host: &'static str| {
        move || async move {
            (
                axum::http::StatusCode::FOUND,
                [(header::LOCATION, format!("http://{host}:{port}/page"))],
            )
        }
    };
    let app = axum::Router::new()
        .route(
            "/page",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    ARTICLE,
                )
            }),
        )
        .route(
            "/plain",
            get(|| async { "plain words\n\n\n\nafter blanks   \n" }),
        )
        .route("/redirect-out", get(to("localhost")))
        .route("/redirect-in", get(to("127.0.0.1")))
        .route(
            "/relative",
            get(|| async { axum::response::Redirect::to("/page") }),
        )
        .route(
            "/to-file",
            get(|| async { axum::response::Redirect::to("file:///etc/passwd") }),
        )
        .route("/big", get(|| async { "x".repeat(4096) }))
        .route(
            "/big-stream",
            get(|| async {
                let chunks = (0..8).map(|_| Ok::<_, std::io::Error>(vec![b'y'; 1024]));
                let body = axum::body::Body::from_stream(futures_util::stream::iter(chunks));
                ([(header::CONTENT_TYPE, "text/plain")], body)
            }),
        )
        .route(
            "/image",
            get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0u8; 16]) }),
        )
        .route(
            "/missing",
            get(|| async { axum::http::StatusCode::NOT_FOUND.into_response() }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

fn policy(port: u16) -> UrlPolicy {
    UrlPolicy {
        hosts: vec![HostRule::parse(&format!("127.0.0.1:{port}")).unwrap()],
        max_bytes: 2048,
        max_text: 4096,
        timeout: Duration::from_secs(10),
    }
}

fn url(port: u16, host: &str, path: &str) -> Url {
    Url::parse(&format!("http://{host}:{port}{path}")).unwrap()
}

#[tokio::test]
async fn an_allowed_page_becomes_its_readable_redacted_text() {
    let port = server().await;
    let p = policy(port);
    let page = fetch(
        &UrlPolicy {
            max_bytes: 64 * 1024,
            ..p.clone()
        },
        &url(port, "127.0.0.1", "/page"),
    )
    .await
    .unwrap();
    assert!(page.text.starts_with("# Widget guide"), "{}", page.text);
    assert!(page.text.contains("frobnication factor"), "{}", page.text);
    assert!(page.text.contains("edit widget.toml"), "{}", page.text);
    for noise in ["SCRIPT-NOISE", "NAV-NOISE", "FOOTER-NOISE", "ghp_abcdef"] {
        assert!(!page.text.contains(noise), "{noise} kept:\n{}", page.text);
    }
    assert!(page.text.contains("[REDACTED:github]"), "{}", page.text);
    assert_eq!(page.cut, 0);

    let plain = fetch(&p, &url(port, "127.0.0.1", "/plain")).await.unwrap();
    assert_eq!(plain.text, "plain words\n\nafter blanks");
}

#[tokio::test]
async fn hosts_off_the_list_and_redirects_to_them_are_refused() {
    let port = server().await;
    let p = policy(port);
    // localhost is the same server, but not the listed host.
    let e = fetch(&p, &url(port, "localhost", "/page"))
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::NotAllowed { .. }), "{e}");
    assert!(
        e.to_string().contains(&format!("\"localhost:{port}\"")),
        "{e}"
    );
    let e = fetch(&UrlPolicy::default(), &url(port, "127.0.0.1", "/page"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, FetchError::NotAllowed { .. }),
        "empty list: {e}"
    );
    let e = fetch(&p, &url(port, "127.0.0.1", "/redirect-out"))
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::RedirectNotAllowed { .. }), "{e}");
    assert!(
        e.to_string().contains("redirects to http://localhost"),
        "{e}"
    );
    let e = fetch(&p, &url(port, "127.0.0.1", "/to-file"))
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::RedirectNotWeb { .. }), "{e}");
    // Positive controls: redirects within the list are followed, relative ones too.
    for path in ["/redirect-in", "/relative"] {
        let page = fetch(
            &UrlPolicy {
                max_bytes: 64 * 1024,
                ..p.clone()
            },
            &url(port, "127.0.0.1", path),
        )
        .await
        .unwrap();
        assert_eq!(page.url, url(port, "127.0.0.1", "/page").to_string());
        assert!(page.text.contains("frobnication"));
    }
    let e: AppError = fetch(&p, &url(port, "localhost", "/page"))
        .await
        .unwrap_err()
        .into();
    assert_eq!((e.status().as_u16(), e.code()), (403, "url_refused"));
}

#[tokio::test]
async fn large_bodies_non_text_and_errors_are_refused() {
    let port = server().await;
    let p = policy(port);
    for path in ["/big", "/big-stream"] {
        let e = fetch(&p, &url(port, "127.0.0.1", path)).await.unwrap_err();
        assert!(
            matches!(e, FetchError::TooLarge { max: 2048, .. }),
            "{path}: {e}"
        );
        // Positive control: the same body under a larger cap is read.
        let page = fetch(
            &UrlPolicy {
                max_bytes: 16 * 1024,
                max_text: 1024,
                ..p.clone()
            },
            &url(port, "127.0.0.1", path),
        )
        .await
        .unwrap();
        assert!(page.text.len() <= 1024, "{path}: cut to the budget");
        assert!(page.cut > 0, "{path}");
    }
    let e = fetch(&p, &url(port, "127.0.0.1", "/image"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("image/png, not text"), "{e}");
    let e = fetch(&p, &url(port, "127.0.0.1", "/missing"))
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::Status { status: 404, .. }), "{e}");
    let e: AppError = e.into();
    assert_eq!((e.status().as_u16(), e.code()), (502, "fetch_failed"));
}

#[test]
fn text_is_cut_to_the_budget_with_a_note() {
    let text = "line one\n".repeat(100) + &"é".repeat(300);
    for max in [64, 100, 500, 901] {
        let (cut, left) = cut_to(&text, max);
        assert!(cut.len() <= max, "{max}: {} bytes", cut.len());
        assert!(cut.contains(&format!("[… {left} more bytes")), "{cut}");
        assert_eq!(text.len() - left, cut.find("\n[…").unwrap(), "what is kept");
    }
    assert_eq!(cut_to("short", 10), ("short".to_string(), 0));
}

#[test]
fn a_url_row_names_an_http_page_and_nothing_the_hub_fills() {
    let row = |url: Option<&str>, content: Option<&str>| ContextRow {
        id: String::new(),
        kind: ContextKind::Url,
        file_path: None,
        start_line: None,
        end_line: None,
        content: content.map(str::to_string),
        url: url.map(str::to_string),
        fetched_at: None,
    };
    assert!(requested_url(&row(Some("https://docs.rs/x"), None)).is_ok());
    for (r, why) in [
        (row(None, None), "needs url"),
        (row(Some("file:///etc/passwd"), None), "only http"),
        (row(Some("not a url"), None), "is not a URL"),
        (
            row(Some("https://docs.rs/x"), Some("forged")),
            "takes no content",
        ),
    ] {
        let e = requested_url(&r).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
}
