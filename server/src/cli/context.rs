//! `hunkgate context add|list`: what is pinned to a session, for the agent of each of its next
//! runs — a web page the hub fetches now (`--page`), a note, or a file of the checkout.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{json, Value};

use crate::cli::{reviewer_client, typed, visible, visible_line, ClientArgs};
use crate::model::session::{ContextKind, ContextRow};

#[derive(Subcommand)]
pub enum ContextCmd {
    /// Pin a web page (--page URL), a note (--note) or a file of the checkout (--file) to a session
    /// (its id or a unique prefix). A page is fetched now, only from a host of the config's
    /// [context] url_hosts (none by default), and its readable text is kept, at most
    /// [context] url_max_text bytes; a refusal says why and is kept in the session's history.
    #[command(group(clap::ArgGroup::new("what").required(true).args(["page", "note", "file"])))]
    Add {
        session: String,
        /// A web page's URL (http or https).
        #[arg(long, value_name = "URL")]
        page: Option<String>,
        #[arg(long)]
        note: Option<String>,
        /// Relative to the repository root; read from your checkout when each run starts.
        #[arg(long)]
        file: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The context pinned to a session: each row's id, kind, and what it holds.
    List {
        session: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

pub async fn context(cmd: ContextCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        ContextCmd::Add {
            session,
            page,
            note,
            file,
            client,
        } => {
            let row = match (page, note, file) {
                (Some(u), _, _) => json!({"kind": "url", "url": u}),
                (_, Some(n), _) => json!({"kind": "note", "content": n}),
                (_, _, Some(f)) => json!({"kind": "file", "file_path": f}),
                _ => anyhow::bail!("name what to pin: --page, --note or --file"),
            };
            let c = reviewer_client(&client).await?;
            let v = c
                .post(&format!("/sessions/{}/context", segment(&session)), row)
                .await?;
            let rows = rows_of(&v)?;
            let Some(row) = rows.last() else {
                anyhow::bail!("the hub answered without the pinned row");
            };
            if client.json {
                println!("{}", serde_json::to_value(row)?);
            } else {
                println!("pinned {}", describe(row));
            }
            Ok(ExitCode::SUCCESS)
        }
        ContextCmd::List { session, client } => {
            let c = reviewer_client(&client).await?;
            let v = c.get_at(&["sessions", &session], &[]).await?;
            let rows = rows_of(&v)?;
            if client.json {
                println!("{}", serde_json::to_value(&rows)?);
            } else if rows.is_empty() {
                println!("nothing is pinned to this session");
            } else {
                for r in &rows {
                    println!("{}", describe(r));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A session id as one path segment: an id is letters, digits and `_`, and only those are
/// kept (a `/` or `?` cannot make it another endpoint).
fn segment(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

fn rows_of(session: &Value) -> anyhow::Result<Vec<ContextRow>> {
    typed(
        session
            .get("context")
            .cloned()
            .unwrap_or(Value::Array(vec![])),
    )
}

/// One line for a row: its id, kind and what it holds (page text is the web's: made visible).
fn describe(r: &ContextRow) -> String {
    let size = r.content.as_ref().map_or(0, String::len);
    match r.kind {
        ContextKind::Url => format!(
            "{}  url   {}  ({size} bytes of text, fetched {})",
            r.id,
            visible_line(r.url.as_deref().unwrap_or("")),
            r.fetched_at.as_deref().unwrap_or("?")
        ),
        ContextKind::File => format!(
            "{}  file  {}",
            r.id,
            visible_line(r.file_path.as_deref().unwrap_or(""))
        ),
        ContextKind::Note | ContextKind::Selection => format!(
            "{}  {}  {}",
            r.id,
            if r.kind == ContextKind::Note {
                "note"
            } else {
                "sel "
            },
            visible(&crate::model::text::one_line(
                r.content.as_deref().unwrap_or(""),
                80
            ))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Top {
        #[command(subcommand)]
        cmd: ContextCmd,
    }

    #[test]
    fn the_arguments_parse_and_exactly_one_thing_is_pinned() {
        use clap::{CommandFactory, Parser};
        Top::command().debug_assert();
        let t = Top::try_parse_from(["x", "add", "sess_1", "--page", "https://docs.rs/"]).unwrap();
        assert!(matches!(t.cmd, ContextCmd::Add { page: Some(_), .. }));
        assert!(
            Top::try_parse_from(["x", "add", "sess_1"]).is_err(),
            "nothing named"
        );
        assert!(
            Top::try_parse_from(["x", "add", "s", "--page", "u", "--note", "n"]).is_err(),
            "two at once"
        );
    }

    #[test]
    fn rows_are_one_line_each_with_web_text_made_visible() {
        let row = |kind, url: Option<&str>, content: Option<&str>| ContextRow {
            id: "ctx_1".into(),
            kind,
            file_path: None,
            start_line: None,
            end_line: None,
            content: content.map(str::to_string),
            url: url.map(str::to_string),
            fetched_at: Some("2026-12-07T10:00:00Z".into()),
        };
        let u = describe(&row(
            ContextKind::Url,
            Some("http://h/\x1b[2Jx"),
            Some("abc"),
        ));
        assert!(!u.contains('\x1b'), "{u:?}");
        assert!(
            u.contains("3 bytes of text") && u.starts_with("ctx_1  url"),
            "{u}"
        );
        let n = describe(&row(ContextKind::Note, None, Some("use\ntabs")));
        assert_eq!(n.lines().count(), 1, "{n}");
        assert_eq!(segment("sess_ab/../x?y"), "sess_abxy");
    }
}
