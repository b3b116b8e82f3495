//! Starting the hub: state dir, lock, token, journal replay and crash recovery, then serving until
//! the shutdown token fires.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use axum::serve::ListenerExt as _;
use hunkgate_sandbox::beneath::Beneath;
use hunkgate_sandbox::store::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::ServeConfig;
use crate::decide::recover::recover;
use crate::hub::{Hub, Parts, State};
use crate::model::decision::DecisionRec;
use crate::model::feedback::FeedbackRecord;
use crate::model::run::RunRec;
use crate::model::suggestion::Suggestion;
use crate::protocol::{Event, RunState};
use crate::store::boot::BootMark;
use crate::store::feedback::FeedbackLog;
use crate::store::journal::{Journal, Record};

/// Create the state dir (0700) or check an existing one is private.
fn prepare_state_dir(dir: &Path) -> anyhow::Result<()> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating state dir {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("state dir {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("state dir {} is not a directory", dir.display());
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "state dir {} is accessible to other users (mode {mode:o}); it holds the hub's token: run `chmod 700 {}`",
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

/// A 0700 state dir of another user passes the mode check but would fail later, obscurely.
fn check_state_dir_owner(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("state dir {}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        bail!(
            "state dir {} belongs to uid {}, not to you (uid {me}); use your own --state-dir",
            dir.display(),
            meta.uid()
        );
    }
    Ok(())
}

/// Hold an exclusive lock on `<state>/lock` for the hub's lifetime: two hubs on one journal
/// would corrupt it.
fn lock_state_dir(dir: &Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    let path = dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
        let hub = std::fs::read_to_string(dir.join("hub.json")).unwrap_or_default();
        anyhow::anyhow!(
            "another hunkgate hub is already serving this repository ({e}; {}): stop it first or pass a different --state-dir",
            hub.trim()
        )
    })
}

pub struct Started {
    pub hub: Arc<Hub>,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// The state a journal describes, and the decision prepared but not committed in it.
struct Replayed {
    suggestions: BTreeMap<String, Suggestion>,
    order: Vec<String>,
    runs: BTreeMap<String, RunRec>,
    pending: Vec<DecisionRec>,
    seq_upto: u64,
    sessions: crate::hub::registry::Sessions,
}

fn replay(records: Vec<Record>) -> anyhow::Result<Replayed> {
    let mut r = Replayed {
        suggestions: BTreeMap::new(),
        order: Vec::new(),
        runs: BTreeMap::new(),
        pending: Vec::new(),
        seq_upto: 0,
        sessions: Default::default(),
    };
    for rec in records {
        match rec {
            Record::Run(run) => {
                r.runs.insert(run.run_id.clone(), *run);
            }
            Record::Suggestion(s) => {
                if !r.suggestions.contains_key(&s.id) {
                    r.order.push(s.id.clone());
                }
                r.suggestions.insert(s.id.clone(), *s);
            }
            // Decisions are made one at a time, and one that stays in the checkout is committed
            // before the next is prepared: an earlier prepare still open here was taken back
            // (its abort could not be written) or failed half way and was reported; recovering
            // it would overwrite later decisions.
            Record::Decision(d) => {
                r.pending.clear();
                r.pending.push(*d);
            }
            Record::Prepare(p) => {
                r.pending.clear();
                r.pending.push(p.into_decision(&r.suggestions));
            }
            Record::Commit { decision } => {
                if let Some(i) = r.pending.iter().position(|p| p.decision == decision) {
                    let d = r.pending.remove(i);
                    d.apply(&mut r.suggestions)
                        .map_err(|e| anyhow::anyhow!("replaying the journal: {e}"))?;
                }
            }
            Record::Abort { decision } => r.pending.retain(|p| p.decision != decision),
            Record::Seq { upto } => r.seq_upto = r.seq_upto.max(upto),
            Record::Checks {
                suggestion_id,
                checks,
                diagnostics,
            } => {
                if let Some(s) = r.suggestions.get_mut(&suggestion_id) {
                    s.checks = Some(checks);
                    s.diagnostics = diagnostics;
                }
            }
            rec @ (Record::Session(_) | Record::History(_)) => r.sessions.replay(rec),
        }
    }
    Ok(r)
}

/// Finish what a crash left between `prepare` and `commit`. Each recovered feedback line
/// carries the seq of the event that announces it: the first ones this hub hands out.
fn recover_pending(
    cfg: &ServeConfig,
    store: &Store,
    pending: Vec<DecisionRec>,
    feedback_path: &Path,
    suggestions: &mut BTreeMap<String, Suggestion>,
    seq_upto: u64,
) -> anyhow::Result<(Vec<FeedbackRecord>, Vec<Event>)> {
    if pending.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let root = Beneath::open(&cfg.repo)?;
    let recovered = recover(&root, store, pending, feedback_path, suggestions)
        .map_err(|e| anyhow::anyhow!("recovering unfinished decisions: {e}"))?;
    let (mut feedback_lines, events): (Vec<_>, Vec<_>) = recovered.into_iter().unzip();
    for (i, f) in feedback_lines.iter_mut().enumerate() {
        f.seq = seq_upto + 1 + i as u64;
    }
    Ok((feedback_lines, events))
}

/// Runs that were working when the hub stopped are over: not a failure of the agent, the hub
/// went away under it. Nothing resumes them, but their session and history stay for the next run.
fn interrupt_unfinished(runs: &mut BTreeMap<String, RunRec>) {
    for run in runs.values_mut() {
        if !run.finished() {
            run.status = RunState::Interrupted;
            run.question = None;
            run.error = Some(crate::runs::INTERRUPTED.into());
        }
    }
}

/// Remove the empty files an older hub kept made ahead of need for loose objects
/// (`hunkgate-spares/` in the checkpoint store, up to 1,024 of them): nothing makes or takes
/// them any more. Best effort: they are empty, and in no way objects.
fn remove_spare_files(store: &Path) {
    let dir = store.join("hunkgate-spares");
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(dir = %dir.display(), error = %e, "removing an older hub's spare files")
        }
        _ => {}
    }
}

/// When the machine restarted since the hub last started here (it may have gone down under
/// the hub), remove the empty loose objects a power loss can leave in the checkpoint store,
/// before recovery or a run reads one; then record this boot.
fn look_over_store_after_a_reboot(state_dir: &Path, store: &Store) -> anyhow::Result<()> {
    let boot = BootMark::read(state_dir);
    if !boot.restarted() {
        return Ok(());
    }
    let dropped = store.drop_empty_loose_objects().with_context(|| {
        format!(
            "looking over the checkpoint store {} after the machine restarted",
            store.path().display()
        )
    })?;
    if dropped > 0 {
        tracing::warn!(
            dropped,
            store = %store.path().display(),
            "the machine went down under the hub: removed empty objects from the checkpoint store (the next run writes those your checkout still has again; an older checkpoint that needs one reports it missing)"
        );
    }
    if let Err(e) = boot.record() {
        tracing::warn!(error = %e, "recording this boot in the state directory");
    }
    Ok(())
}

/// Open everything and rebuild state; does not serve yet.
pub fn open_hub(
    mut cfg: ServeConfig,
    port: u16,
    shutdown: CancellationToken,
) -> anyhow::Result<Started> {
    cfg.port = port;
    prepare_state_dir(&cfg.state_dir)?;
    // Before anything secret is read or created: nothing of it may be open to the sandbox user.
    crate::config::checks::startup_checks(&cfg)?;
    check_state_dir_owner(&cfg.state_dir)?;
    let lock = lock_state_dir(&cfg.state_dir)?;
    let token = crate::hub::auth::load_or_create_token(&cfg.state_dir.join("token"))
        .context("the reviewer token")?;
    let mut store = Store::open_or_init(&cfg.state_dir.join("checkpoints.git"))?;
    store.use_packs(cfg.accel.pack);
    remove_spare_files(&cfg.state_dir.join("checkpoints.git"));
    look_over_store_after_a_reboot(&cfg.state_dir, &store)?;
    let journal_path = cfg.state_dir.join("state.jsonl");
    let feedback_path = cfg.state_dir.join("feedback.jsonl");

    let Replayed {
        mut suggestions,
        order,
        mut runs,
        pending,
        seq_upto,
        sessions,
    } = replay(Journal::read(&journal_path)?)?;
    let (feedback_lines, recovered_events) = recover_pending(
        &cfg,
        &store,
        pending,
        &feedback_path,
        &mut suggestions,
        seq_upto,
    )?;
    let mut feedback = FeedbackLog::open(&feedback_path)
        .with_context(|| format!("opening {}", feedback_path.display()))?;
    feedback.append(&feedback_lines)?;
    interrupt_unfinished(&mut runs);
    // Compact: one record per run and suggestion, the sessions, then the sequence mark.
    let state = State {
        suggestions,
        order,
        runs,
        sessions,
    };
    match crate::runs::restore_run_refs(&store, &state) {
        Ok(0) => {}
        Ok(set) => tracing::info!(
            set,
            "set the checkpoint store's refs of suggestions announced before the hub stopped"
        ),
        Err(e) => tracing::warn!(error = %e, "restoring the checkpoint store's refs"),
    }
    let compact = state.records(seq_upto + feedback_lines.len() as u64);
    let journal = Journal::rewrite(&journal_path, &compact)?;
    let hub = Arc::new(Hub::new(Parts {
        cfg,
        store,
        journal,
        seq_upto,
        feedback,
        state,
        reviewer_token: token,
        shutdown,
    }));
    for (ev, line) in recovered_events.into_iter().zip(&feedback_lines) {
        let seq = hub.bus().emit(ev);
        debug_assert_eq!(seq, line.seq);
    }
    Ok(Started { hub, _lock: lock })
}

/// Serve on `listener` until `shutdown` fires, then stop runs and return.
pub async fn run(
    listener: TcpListener,
    cfg: ServeConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_then(listener, cfg, shutdown, |_| {}).await
}

/// [`run`], calling `ready` once the hub is open (its state read, recovered and writable) and
/// `hub.json` and its discovery record ([`crate::discovery`]) written, right before it serves: a
/// hub that cannot start never says it serves. A clean exit removes both (the record only while
/// it is still this hub's).
pub async fn run_then(
    listener: TcpListener,
    cfg: ServeConfig,
    shutdown: CancellationToken,
    ready: impl FnOnce(&ServeConfig),
) -> anyhow::Result<()> {
    let port = listener.local_addr()?.port();
    let started = open_hub(cfg, port, shutdown.clone())?;
    let hub = started.hub.clone();
    let hub_json = hub.cfg().state_dir.join("hub.json");
    let record = crate::discovery::Record::for_this_process(
        &hub.cfg().repo,
        &hub.url(),
        &hub.cfg().state_dir,
    )?;
    let discovery_dir = crate::discovery::dir()?;
    warn_of_another_hub(&discovery_dir, &record);
    let record_path = crate::discovery::write(&discovery_dir, &record)?;
    tracing::debug!(record = %record_path.display(), "wrote the hub's discovery record");
    // After the discovery record: whoever sees `hub.json` finds the hub by its repository too.
    write_private(
        &hub_json,
        &serde_json::to_vec(&record).expect("a record serialises"),
    )?;
    ready(hub.cfg());
    let weak = Arc::downgrade(&hub);
    hub.tasks().spawn(crate::hub::quiet::give_back_when_quiet(
        hub.quiet().clone(),
        shutdown.clone(),
        move || {
            if let Some(hub) = weak.upgrade() {
                if let Err(e) = hub.store().release_maps_after(1) {
                    tracing::debug!(error = %e, "keeping the checkpoint store's maps");
                }
            }
        },
    ));
    // Seed 000 §25: collect finished work past its retention at start, and then on a timer.
    hub.collect_in_background(crate::gc::Trigger::Start);
    if let Some(every) = hub.cfg().retention.interval {
        hub.tasks().spawn(crate::gc::collect_on_a_timer(
            Arc::downgrade(&hub),
            every,
            shutdown.clone(),
        ));
    }
    // Opening the hub read its journal whole and decoded every suggestion in it: a heap in
    // proportion to the journal, most of it freed again, and resident until something else
    // gave it back (after a restart on three suggestions of 300,000 lines, 233 MiB
    // anonymous for 85 MB still in use). Returned once the hub has been quiet for a moment.
    hub.quiet().note();
    tracing::info!(url = %hub.url(), repo = %hub.cfg().repo.display(), state = %hub.cfg().state_dir.display(), "hunkgate hub listening");
    let app = crate::api::http::router(hub.clone());
    let served = axum::serve(without_nagle(listener), app)
        .with_graceful_shutdown({
            let s = shutdown.clone();
            async move { s.cancelled().await }
        })
        .await;
    // Runs hold child tokens of `shutdown`, so their agents are being killed now.
    hub.tasks().close();
    if tokio::time::timeout(Duration::from_secs(10), hub.tasks().wait())
        .await
        .is_err()
    {
        tracing::warn!("runs did not stop within 10s");
    }
    let _ = std::fs::remove_file(&hub_json);
    if let Err(e) = crate::discovery::remove_own(&discovery_dir, &record) {
        tracing::warn!(error = %e, record = %record_path.display(), "removing the hub's discovery record");
    }
    drop(started);
    served.context("serving")
}

/// Another hub of the same repository (on another state dir) still running: this one takes the
/// discovery record, so clients find this one, and that one only by its state dir.
fn warn_of_another_hub(dir: &Path, mine: &crate::discovery::Record) {
    if let Ok(Some(other)) = crate::discovery::read(dir, &mine.repo) {
        if other.pid != mine.pid && other.stale().is_none() {
            tracing::warn!(
                pid = other.pid,
                url = %other.url,
                state = %other.state_dir.display(),
                "another hub serves this repository; clients now find this one (reach that one with --state-dir)"
            );
        }
    }
}

/// `listener` with TCP_NODELAY set on every connection it accepts. Replies and events are small
/// frames written back to back (a decision's events, then its reply): with Nagle's algorithm
/// on, the later ones wait until the client ACKs the first, and clients delay ACKs by up to
/// 40 ms — which was the whole of an accept's round trip before this.
pub fn without_nagle(
    listener: TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "setting TCP_NODELAY on a connection");
        }
    })
}

pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::store::journal::write_file_atomic(path, bytes, 0o600)
}

#[cfg(test)]
mod nagle_tests {
    use axum::serve::Listener;

    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = plain.local_addr().unwrap();
        let mut wrapped = without_nagle(plain);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (io, _) = wrapped.accept().await;
        assert!(io.nodelay().unwrap());
        // Positive control: a socket accepted without the wrapper has Nagle on.
        let mut plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = plain.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (io, _) = Listener::accept(&mut plain).await;
        assert!(!io.nodelay().unwrap());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ChecksState, ChecksView};

    fn suggestion(id: &str) -> Suggestion {
        Suggestion {
            id: id.into(),
            run_id: "r".into(),
            description: "d".into(),
            base_commit: String::new(),
            run_commit: String::new(),
            change_id: None,
            created_at: String::new(),
            agent: None,
            prompt: None,
            hunks: Vec::new(),
            closed: None,
            reviewed_commit: None,
            skipped: Vec::new(),
            checks: None,
            diagnostics: Vec::new(),
        }
    }

    /// A `checks` record sets a suggestion's checks and nothing else of it; one for a
    /// suggestion the journal no longer has is dropped.
    #[test]
    fn a_checks_record_sets_only_the_checks_of_its_suggestion() {
        let checks = ChecksView {
            state: ChecksState::Incomplete,
            notes: vec!["ruff: timed out".into()],
            checkers: vec!["ruff".into()],
        };
        let mut closed = suggestion("s");
        closed.closed = Some("finalize".into());
        let line = serde_json::to_string(&Record::Checks {
            suggestion_id: "s".into(),
            checks: checks.clone(),
            diagnostics: Vec::new(),
        })
        .unwrap();
        assert!(line.starts_with(r#"{"t":"checks","#), "{line}");
        let checks_rec: Record = serde_json::from_str(&line).unwrap();
        let gone = Record::Checks {
            suggestion_id: "gone".into(),
            checks: checks.clone(),
            diagnostics: Vec::new(),
        };
        let r = replay(vec![Record::Suggestion(Box::new(closed)), checks_rec, gone]).unwrap();
        assert_eq!(r.suggestions.len(), 1);
        let s = &r.suggestions["s"];
        assert_eq!(s.checks, Some(checks));
        assert_eq!(s.closed.as_deref(), Some("finalize"), "the rest as it was");
    }
}

#[cfg(test)]
mod spare_files_tests {
    use super::*;

    /// An older hub's spare files go at the start; the store's own files stay, and a store
    /// without them is fine.
    #[test]
    fn an_older_hubs_spare_files_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("checkpoints.git");
        Store::open_or_init(&store).unwrap();
        let spares = store.join("hunkgate-spares");
        std::fs::create_dir(&spares).unwrap();
        for i in 0..3 {
            std::fs::write(spares.join(format!("spare-{i}")), b"").unwrap();
        }
        remove_spare_files(&store);
        assert!(!spares.exists());
        assert!(store.join("HEAD").is_file(), "the store itself is kept");
        remove_spare_files(&store);
        assert!(!spares.exists());
    }
}
