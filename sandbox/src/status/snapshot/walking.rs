//! Walking a tree for candidate paths: .gitignore files honoured, `.git` never entered, every
//! name that cannot be carried reported; a walk may stop at a budget of new paths.

use super::*;

/// Candidate paths from a walk that honours .gitignore files and never descends into `.git`.
pub(crate) fn walk_not_ignored(root: &Path, user_excludes: bool) -> BTreeSet<String> {
    walk_reporting(root, user_excludes).0
}

/// A name hunkgate cannot carry (not UTF-8), shown with its odd bytes as `\xNN`.
pub fn shown_name(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

pub(super) const NOT_UTF8: &str = "file name is not UTF-8: hunkgate cannot review it";

/// [`walk_not_ignored`], also reporting the files it leaves out because their names are not
/// UTF-8 (never silently: a file left out of a snapshot must not look deleted or absent).
pub(crate) fn walk_reporting(root: &Path, user_excludes: bool) -> (BTreeSet<String>, Vec<Skipped>) {
    let w = walk(root, user_excludes, None, None);
    (w.files, w.skipped)
}

/// What a walk found.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// Files (and symlinks, and other non-directories) not ignored.
    pub files: BTreeSet<String>,
    /// Names it could not carry (not UTF-8), to be reported.
    pub skipped: Vec<Skipped>,
    /// The directories it entered (`""` is the root).
    pub dirs: Vec<String>,
    /// It stopped at its `max_files`: there were more files (and names it could not carry)
    /// than that, and only that many are in `files` and `skipped`.
    pub stopped: bool,
}

/// Walk `root` as git would list it: `.gitignore` files apply (and with `user_excludes` the
/// user's global excludes and `.git/info/exclude`), `.git` and `.jj` are never entered, nothing
/// is followed. With `within`, only the directories it [enters](Within::enters) are entered —
/// the directories where change notification saw something (see [`crate::status::watch`]) and the way
/// to them, each read with the same ignore rules as a whole walk would read it.
///
/// With `max_files`, it stops once it has found more files (and names it cannot carry) than
/// that — [`Walked::stopped`] — holding no more than that many: what a directory the agent
/// filled with millions of files costs the hub is bounded by the caller's limit, not by the
/// directory.
pub(crate) fn walk(
    root: &Path,
    user_excludes: bool,
    within: Option<Within>,
    max_files: Option<usize>,
) -> Walked {
    let restricted = within.is_some();
    let base = root.to_path_buf();
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .hidden(false)
        .follow_links(false)
        .parents(false)
        .require_git(false)
        .git_ignore(true)
        .git_global(user_excludes)
        .git_exclude(user_excludes)
        .ignore(false)
        // VCS metadata is never content: .git, and jj's .jj.
        .filter_entry(move |e| {
            if e.file_name() == ".git" || e.file_name() == ".jj" {
                return false;
            }
            match &within {
                Some(within) if e.file_type().is_some_and(|t| t.is_dir()) => e
                    .path()
                    .strip_prefix(&base)
                    .ok()
                    .and_then(|rel| rel.to_str())
                    .is_some_and(|rel| within.enters(rel)),
                _ => true,
            }
        });
    // The parallel walker: a whole walk shares its directories among a few threads (reading
    // 10,000 entries is most of a sandbox read-back); a restricted one gets one worker, the
    // point there being what is not read (the sequential walker opens every directory before
    // its filter can skip it, the parallel one asks the filter first).
    let threads = if restricted {
        1
    } else {
        crate::threads::io_threads()
    };
    let found = std::sync::Mutex::new(Vec::new());
    let budget = Budget {
        left: max_files.map(std::sync::atomic::AtomicUsize::new),
        stopped: std::sync::atomic::AtomicBool::new(false),
    };
    builder
        .threads(threads)
        .build_parallel()
        .visit(&mut Collect {
            root,
            found: &found,
            budget: &budget,
        });
    let parts = found.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut out = Walked {
        stopped: budget.stopped.into_inner(),
        ..Walked::default()
    };
    for part in parts {
        out.files.extend(part.files);
        out.dirs.extend(part.dirs);
        out.skipped.extend(part.skipped);
    }
    out.dirs.sort();
    out.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// What each thread of [`walk`] found, kept apart (no lock per entry) and handed over when the
/// thread's visitor is dropped at the end of the walk.
pub(super) struct Collect<'a> {
    pub(super) root: &'a Path,
    pub(super) found: &'a std::sync::Mutex<Vec<Walked>>,
    pub(super) budget: &'a Budget,
}

/// How many more files a [`walk`]'s threads may take between them (None: no limit), and
/// whether one of them found a file past that.
pub(super) struct Budget {
    pub(super) left: Option<std::sync::atomic::AtomicUsize>,
    pub(super) stopped: std::sync::atomic::AtomicBool,
}

impl Budget {
    /// Take one file from the budget; false (and the walk stopped) when none is left.
    fn take_one(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(left) = &self.left else {
            return true;
        };
        let took = left
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if !took {
            self.stopped.store(true, Relaxed);
        }
        took
    }
}

/// One thread's share of a [`walk`].
pub(super) struct CollectOne<'a> {
    pub(super) root: &'a Path,
    pub(super) found: &'a std::sync::Mutex<Vec<Walked>>,
    pub(super) budget: &'a Budget,
    pub(super) mine: Walked,
}

impl<'s> ignore::ParallelVisitorBuilder<'s> for Collect<'s> {
    fn build(&mut self) -> Box<dyn ignore::ParallelVisitor + 's> {
        Box::new(CollectOne {
            root: self.root,
            found: self.found,
            budget: self.budget,
            mine: Walked::default(),
        })
    }
}

impl ignore::ParallelVisitor for CollectOne<'_> {
    fn visit(&mut self, entry: Result<ignore::DirEntry, ignore::Error>) -> ignore::WalkState {
        let took = match entry {
            Ok(entry) => self.mine.take(self.root, &entry, self.budget),
            Err(e) => self.mine.take_error(self.root, &e, self.budget),
        };
        match took {
            true => ignore::WalkState::Continue,
            false => ignore::WalkState::Quit,
        }
    }
}

impl Drop for CollectOne<'_> {
    fn drop(&mut self) {
        let mine = std::mem::take(&mut self.mine);
        match self.found.lock() {
            Ok(mut found) => found.push(mine),
            Err(poisoned) => poisoned.into_inner().push(mine),
        }
    }
}

impl Walked {
    /// Keep what `entry` is; false when it is a file past the walk's budget (then it is not
    /// kept, and the walk stops).
    fn take(&mut self, root: &Path, entry: &ignore::DirEntry, budget: &Budget) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        // The walker builds each path as `root` + `/` + names: its relative part is a byte
        // slice (`Path::strip_prefix` compares component by component, a tenth of a walk).
        let (path, root) = (
            entry.path().as_os_str().as_bytes(),
            root.as_os_str().as_bytes(),
        );
        let Some(rel) = path.strip_prefix(root) else {
            return true;
        };
        let rel = rel.strip_prefix(b"/").unwrap_or(rel);
        if rel.len() as u64 > crate::wire::MAX_PATH {
            // Its directory could be read, yet its path is past what hunkgate carries. (A
            // directory cannot be read in turn: that error reports it, see `take_error`.)
            return is_dir || self.skip(rel, TOO_LONG.into(), budget);
        }
        match std::str::from_utf8(rel).ok() {
            Some(s) if is_dir => self.dirs.push(s.to_string()),
            Some("") => {}
            None if is_dir => {}
            _ if !budget.take_one() => return false,
            Some(s) => {
                self.files.insert(s.to_string());
            }
            None => self.skipped.push(Skipped {
                path: shown_path(rel),
                reason: NOT_UTF8.into(),
            }),
        }
        true
    }
}

impl Walked {
    /// Keep what the walker could not read (a directory its user may not list, one whose
    /// path is past `PATH_MAX`) as skipped, with why: never silently left out. An error
    /// without a path under `root` or an I/O cause (a symlink loop is never met: nothing is
    /// followed) is not one. False past the walk's budget, as for [`Walked::take`].
    fn take_error(&mut self, root: &Path, e: &ignore::Error, budget: &Budget) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let (Some(path), Some(io)) = (error_path(e), e.io_error()) else {
            return true;
        };
        let Ok(rel) = path.strip_prefix(root) else {
            return true;
        };
        let reason = match io.raw_os_error() {
            Some(nix::libc::ENAMETOOLONG) => TOO_LONG.to_string(),
            _ => format!("cannot be read ({io}): hunkgate cannot review it"),
        };
        self.skip(rel.as_os_str().as_bytes(), reason, budget)
    }

    /// Report `rel` as skipped for `reason`, within the walk's budget.
    fn skip(&mut self, rel: &[u8], reason: String, budget: &Budget) -> bool {
        if !budget.take_one() {
            return false;
        }
        self.skipped.push(Skipped {
            path: shown_path(rel),
            reason,
        });
        true
    }
}

pub(super) const TOO_LONG: &str = "path is longer than 4096 bytes: hunkgate cannot review it";

/// The most bytes of a path [`shown_path`] shows.
pub(super) const SHOWN_PATH_MAX: usize = 256;

/// A path as a skip report shows it: [`shown_name`], cut after its first
/// [`SHOWN_PATH_MAX`] bytes with how long it was (a path past `PATH_MAX` fits no frame).
pub(super) fn shown_path(rel: &[u8]) -> String {
    if rel.len() <= SHOWN_PATH_MAX {
        return shown_name(rel);
    }
    format!(
        "{}… ({} bytes)",
        shown_name(&rel[..SHOWN_PATH_MAX]),
        rel.len()
    )
}

/// The path an error of the walker names, if it names one.
pub(super) fn error_path(e: &ignore::Error) -> Option<&Path> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        _ => None,
    }
}
