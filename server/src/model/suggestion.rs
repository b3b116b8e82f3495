//! Suggestions and hunks: built from a base tree and a run tree, and the records the hub keeps
//! (and journals) about them.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use hunkgate_patch::{as_text, diff_hunks, into_text, Hunk, Limits};
use hunkgate_sandbox::store::Changes;
use hunkgate_sandbox::store::{BlobReader, Entry, FlatTree, Fresh, Mode, Store, StoreError};
use hunkgate_sandbox::ObjectId;
use serde::{Deserialize, Serialize};

use super::sizing::{is_rewrite, sized};
use crate::protocol::{
    HunkHeader, HunkKind, HunkMerge, HunkState, HunkView, SuggestionStatus, SuggestionView,
};

/// Lines of context around each hunk, as `git diff` uses by default.
pub const CONTEXT: usize = 3;

/// A file's state on one side of a hunk; `None` = absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Side {
    pub mode: Mode,
    /// Written as git prints it, 40 hex digits; held as its 20 bytes, in the record of every
    /// hunk the hub keeps (as text, it was a pointer and an allocation of its own).
    #[serde(with = "hex_oid")]
    pub oid: ObjectId,
}

impl Side {
    pub fn of(entry: Option<&Entry>) -> Option<Side> {
        entry.map(|e| Side {
            mode: e.mode,
            oid: e.oid,
        })
    }
}

/// An object id as its hex digits, read back refusing anything that is not one.
mod hex_oid {
    use std::fmt;

    use hunkgate_sandbox::ObjectId;
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(oid: &ObjectId, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(oid)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectId, D::Error> {
        struct Hex;
        impl de::Visitor<'_> for Hex {
            type Value = ObjectId;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object id of 40 hex digits")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ObjectId, E> {
                ObjectId::from_hex(v.as_bytes())
                    .map_err(|e| E::custom(format_args!("object id {v:?}: {e}")))
            }
        }
        d.deserialize_str(Hex)
    }
}

/// One reviewable change, as the hub stores it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HunkRec {
    pub id: String,
    pub file: String,
    pub index: usize,
    pub kind: HunkKind,
    pub state: HunkState,
    /// For line hunks (modify / create / delete of text files, symlink targets). Journaled as
    /// its unified-diff text (see [`patch_text`]).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "patch_text")]
    pub patch: Option<Hunk>,
    /// Whole-file sides (binary, rename, mode, and the file-level checks of create/delete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<Side>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<Side>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// An accepted `delete`'s file permission bits, for undoing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perm: Option<u32>,
    /// What was actually applied (the user's version for `modify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Box<Hunk>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// The three-way merge of this hunk with the user's edit that made it stale (computed when
    /// an accept finds it stale; [`crate::decide::merge`]), or the clean one that landed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<HunkMerge>,
    /// Why the agent made this change (`hunk_descriptions` at publish, or the built-in
    /// agent's edit rationale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Decided in part: the 1-based range of its diff's lines that was accepted (what landed is
    /// `applied`) or rejected; the rest is the hunk whose `parent` this one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<[usize; 2]>,
    /// Left by a line-range decision on this hunk: what was not decided of it, re-anchored to
    /// the file as that decision left it ([`crate::decide::lines`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Deletes a file, renames it, changes its mode or deletes many lines
    /// ([`mark_destructive`]): an accept-all leaves it pending unless confirmed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub destructive: bool,
    /// Shows more than `[review] max_hunk_lines` or `max_hunk_bytes`, and no cut keeps its
    /// parts independent ([`hunkgate_patch::fit_hunk`]): the reviewer takes it whole or
    /// decides it by line ranges.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oversized: bool,
    /// One of the hunks of a file the change rewrote ([`is_rewrite`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rewrite: bool,
}

/// A hunk's patch in the journal: its unified-diff text (`"@@ -2,7 +2,7 @@\n ctx\n-old\n+new\n…"`,
/// [`Hunk::to_unified`]), which [`hunkgate_patch::parse_hunks`] reads back to the same hunk. It
/// is a third smaller than the hunk as a structure (a `{"op","text"}` object per line), and
/// quicker to encode — a publish journals every hunk of its suggestion before announcing it.
///
/// Reading takes either form: journals written before this one hold structures. A hunk the
/// text could not carry exactly (its counts not those of its lines, a line with a line break
/// inside, no lines at all — none that a diff makes) is written as the structure.
pub mod patch_text {
    use hunkgate_patch::{parse_hunks, Hunk, HunkLine};
    use serde::de::{self, Deserializer, MapAccess, Visitor};
    use serde::{Deserialize, Serializer};

    pub fn serialize<S: Serializer>(hunk: &Option<Hunk>, s: S) -> Result<S::Ok, S::Error> {
        match hunk {
            Some(h) if carried_by_text(h) => s.serialize_some(&h.to_unified()),
            Some(h) => s.serialize_some(h),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Hunk>, D::Error> {
        d.deserialize_option(OptionalPatch)
    }

    /// Whether `parse_hunks(h.to_unified())` is `h` again: its lines are there, each one line
    /// (a break only at its end), and they add up to its counts.
    pub fn carried_by_text(h: &Hunk) -> bool {
        let (mut old, mut new) = (0, 0);
        for line in &h.lines {
            let t = line.text();
            if t.strip_suffix('\n').unwrap_or(t).contains('\n') {
                return false;
            }
            match line {
                HunkLine::Context(_) => (old, new) = (old + 1, new + 1),
                HunkLine::Remove(_) => old += 1,
                HunkLine::Add(_) => new += 1,
            }
        }
        !h.lines.is_empty() && old == h.old_len && new == h.new_len
    }

    struct OptionalPatch;

    impl<'de> Visitor<'de> for OptionalPatch {
        type Value = Option<Hunk>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a hunk's unified-diff text or its structure")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Patch).map(Some)
        }
    }

    struct Patch;

    impl<'de> Visitor<'de> for Patch {
        type Value = Hunk;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a hunk's unified-diff text or its structure")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Hunk, E> {
            let mut hunks = parse_hunks(text).map_err(E::custom)?;
            match (hunks.pop(), hunks.is_empty()) {
                (Some(h), true) => Ok(h),
                _ => Err(E::custom("a hunk's patch holds more than one hunk")),
            }
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Hunk, A::Error> {
            Hunk::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }
}

impl HunkRec {
    /// A pending hunk of `file`, not yet numbered (no id, index 0), with nothing else known of
    /// it: what a publish fills in.
    pub fn pending(file: &str, kind: HunkKind, patch: Option<Hunk>) -> HunkRec {
        HunkRec {
            id: String::new(),
            file: file.to_string(),
            index: 0,
            kind,
            state: HunkState::Pending,
            patch,
            old: None,
            new: None,
            old_path: None,
            perm: None,
            applied: None,
            comment: None,
            conflict: None,
            merge: None,
            description: None,
            lines: None,
            parent: None,
            destructive: false,
            oversized: false,
            rewrite: false,
        }
    }

    pub fn diff_text(&self) -> String {
        match self.kind {
            HunkKind::Modify | HunkKind::Create | HunkKind::Delete | HunkKind::Symlink => self
                .patch
                .as_ref()
                .map(|p| p.to_unified())
                .unwrap_or_default(),
            HunkKind::Binary => format!("Binary files a/{0} and b/{0} differ\n", self.file),
            HunkKind::Rename => format!(
                "rename from {}\nrename to {}\n",
                self.old_path.as_deref().unwrap_or(""),
                self.file
            ),
            HunkKind::Mode => format!(
                "old mode {}\nnew mode {}\n",
                self.old.as_ref().map(|s| s.mode.octal()).unwrap_or(""),
                self.new.as_ref().map(|s| s.mode.octal()).unwrap_or("")
            ),
        }
    }

    pub fn view(&self) -> HunkView {
        HunkView {
            id: self.id.clone(),
            file: self.file.clone(),
            diff: self.diff_text(),
            kind: self.kind,
            index: self.index,
            state: self.state,
            old_path: self.old_path.clone(),
            header: self.patch.as_ref().map(|p| HunkHeader {
                old_start: p.old_start,
                old_lines: p.old_len,
                new_start: p.new_start,
                new_lines: p.new_len,
            }),
            applied_diff: match (self.state, &self.applied) {
                (HunkState::Modified, Some(a)) => Some(a.to_unified()),
                (HunkState::Accepted, Some(a)) if self.lines.is_some() => Some(a.to_unified()),
                _ => None,
            },
            lines: self.lines,
            parent_hunk_id: self.parent.clone(),
            comment: self.comment.clone(),
            conflict: self.conflict.clone(),
            description: self.description.clone(),
            merge: self.merge.clone(),
            destructive: self.destructive,
            oversized: self.oversized,
            rewrite: self.rewrite,
            diagnostics: Vec::new(),
        }
    }

    /// What makes this hunk destructive, in words (None: it is not).
    pub fn destructive_why(&self) -> Option<String> {
        if !self.destructive {
            return None;
        }
        Some(match self.kind {
            HunkKind::Rename => format!(
                "renames {} to {}",
                self.old_path.as_deref().unwrap_or("?"),
                self.file
            ),
            HunkKind::Mode => format!("changes the mode of {}", self.file),
            _ if self.old.is_some() && self.new.is_none() => format!("deletes {}", self.file),
            _ => format!("deletes {} lines of {}", self.removed_lines(), self.file),
        })
    }

    /// Lines this hunk removes from the file.
    fn removed_lines(&self) -> usize {
        self.patch.as_ref().map_or(0, |p| {
            p.lines
                .iter()
                .filter(|l| matches!(l, hunkgate_patch::HunkLine::Remove(_)))
                .count()
        })
    }
}

/// The lines a hunk may delete before it counts as destructive, unless the config says
/// otherwise (`[review] destructive_deleted_lines`).
pub const DEFAULT_DESTRUCTIVE_DELETED_LINES: usize = 50;

/// Mark the hunks an accept-all must not land unasked (seed 002, "pre-approval only for
/// destructive actions"): those that delete a file (of any kind), rename one, change its mode,
/// or delete more than `max_deleted_lines` lines. What they remove is gone from the checkout
/// once accepted, so the reviewer says yes to each of them, or to all of them knowingly.
pub fn mark_destructive(hunks: &mut [HunkRec], max_deleted_lines: usize) {
    for h in hunks {
        let deletes_file = h.old.is_some() && h.new.is_none();
        h.destructive = deletes_file
            || matches!(h.kind, HunkKind::Rename | HunkKind::Mode | HunkKind::Delete)
            || h.removed_lines() > max_deleted_lines;
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Suggestion {
    pub id: String,
    pub run_id: String,
    pub description: String,
    pub base_commit: String,
    pub run_commit: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_id: Option<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    pub hunks: Vec<HunkRec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewed_commit: Option<String>,
    /// Files the run's snapshot left out (reported, never hunks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<crate::protocol::SkippedFile>,
    /// How the configured checkers went, once they ran ([`crate::model::diagnostics`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<crate::protocol::ChecksView>,
    /// Their new and fixed diagnostics, each with the hunk it falls on (if any): kept here,
    /// not in the hunks, and handed to each hunk's view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<crate::protocol::Diagnostic>,
}

impl Suggestion {
    pub fn files(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for h in &self.hunks {
            if seen.insert(h.file.clone()) {
                out.push(h.file.clone());
            }
        }
        out
    }

    pub fn reviewed_count(&self) -> usize {
        self.hunks.iter().filter(|h| h.state.reviewed()).count()
    }

    pub fn status(&self) -> SuggestionStatus {
        let reviewed = self.reviewed_count();
        if reviewed == self.hunks.len() || self.closed.is_some() {
            SuggestionStatus::Complete
        } else if reviewed == 0 {
            SuggestionStatus::Pending
        } else {
            SuggestionStatus::Partial
        }
    }

    pub fn hunk(&self, id: &str) -> Option<&HunkRec> {
        self.hunks.iter().find(|h| h.id == id)
    }

    pub fn view(&self) -> SuggestionView {
        SuggestionView {
            id: self.id.clone(),
            jj_change_id: self
                .change_id
                .clone()
                .unwrap_or_else(|| self.run_commit.clone()),
            description: self.description.clone(),
            files: self.files(),
            hunks: self.hunks.iter().map(|h| self.hunk_view(h)).collect(),
            hunk_count: self.hunks.len(),
            reviewed_count: self.reviewed_count(),
            status: self.status(),
            closed: self.closed.clone(),
            run_id: self.run_id.clone(),
            base_commit: self.base_commit.clone(),
            run_commit: self.run_commit.clone(),
            reviewed_commit: self.reviewed_commit.clone(),
            created_at: self.created_at.clone(),
            agent: self.agent.clone(),
            prompt: self.prompt.clone(),
            skipped: self.skipped.clone(),
            checks: self.checks.clone(),
            diagnostics: self
                .diagnostics
                .iter()
                .filter(|d| d.hunk_id.is_none())
                .cloned()
                .collect(),
        }
    }

    /// A hunk's view with the diagnostics that fall on it.
    pub fn hunk_view(&self, h: &HunkRec) -> HunkView {
        let mut view = h.view();
        view.diagnostics = self
            .diagnostics
            .iter()
            .filter(|d| d.hunk_id.as_deref() == Some(h.id.as_str()))
            .cloned()
            .collect();
        view
    }
}

/// Where a diff reads blobs: those a read-back kept in memory, else the store.
#[derive(Clone, Copy)]
pub struct Blobs<'a> {
    pub store: &'a Store,
    pub fresh: &'a Fresh,
}

impl<'a> Blobs<'a> {
    /// Blobs read from the store only.
    pub fn stored(store: &'a Store) -> Self {
        static NONE: std::sync::OnceLock<Fresh> = std::sync::OnceLock::new();
        Blobs {
            store,
            fresh: NONE.get_or_init(Fresh::default),
        }
    }

    /// These blobs as one thread reads them.
    fn on_thread(self) -> ThreadBlobs<'a> {
        ThreadBlobs {
            blobs: self,
            reader: std::cell::OnceCell::new(),
        }
    }
}

/// [`Blobs`] as one thread reads them: the store's reader is made at the first blob that is
/// not in memory, and kept for the thread's next ones.
struct ThreadBlobs<'a> {
    blobs: Blobs<'a>,
    reader: std::cell::OnceCell<BlobReader<'a>>,
}

impl<'a> ThreadBlobs<'a> {
    fn read(&self, oid: ObjectId) -> Result<Cow<'a, [u8]>, StoreError> {
        match self.blobs.fresh.get(&oid) {
            Some(bytes) => Ok(Cow::Borrowed(bytes)),
            None => {
                let reader = self.reader.get_or_init(|| self.blobs.store.reader());
                Ok(Cow::Owned(reader.read_blob(oid)?))
            }
        }
    }

    /// Text of a blob when it is reviewable line by line.
    fn text_of(&self, entry: &Entry) -> Result<Option<Cow<'a, str>>, StoreError> {
        // Known not to be text when it was written: not read back.
        if self.blobs.fresh.not_text(&entry.oid) {
            return Ok(None);
        }
        Ok(match self.read(entry.oid)? {
            Cow::Borrowed(b) => as_text(b).map(Cow::Borrowed),
            Cow::Owned(b) => into_text(b).map(Cow::Owned),
        })
    }
}

/// A path's entry in the base and after the change (None: absent).
type Sides<'a> = (Option<&'a Entry>, Option<&'a Entry>);
type Changed<'a> = BTreeMap<&'a str, Sides<'a>>;

/// The hunk records (ids filled in with `suggestion_id`) of `changes` made to `base`, in path
/// order, cut to `limits` ([`sized`]). `only` restricts the result to paths it accepts (the
/// agent's `--files` globs).
pub fn build_hunks(
    blobs: Blobs<'_>,
    suggestion_id: &str,
    base: &FlatTree,
    changes: &Changes,
    only: &dyn Fn(&str) -> bool,
    limits: Limits,
) -> Result<Vec<HunkRec>, StoreError> {
    let mut changed: Changed = changes
        .iter()
        .filter(|(path, new)| base.get(*path) != new.as_ref())
        .map(|(path, new)| (path.as_str(), (base.get(path), new.as_ref())))
        .collect();
    changed.retain(|p, _| only(p));
    let renames = exact_renames(&changed);
    let renamed_from: BTreeSet<String> = renames.values().cloned().collect();

    // The diffs (most of the work) are made apart, on a few threads when there are many.
    let diffed: Vec<(&str, Sides)> = changed
        .iter()
        .filter(|(path, _)| !renamed_from.contains(**path) && !renames.contains_key(**path))
        .map(|(path, sides)| (*path, *sides))
        .collect();
    let mut diffs = diff_all(blobs, &diffed)?.into_iter();
    let mut out = Vec::new();
    for (path, (old, new)) in &changed {
        if renamed_from.contains(*path) {
            continue;
        }
        let mk = |kind: HunkKind, patch: Option<Hunk>| HunkRec {
            old: Side::of(*old),
            new: Side::of(*new),
            ..HunkRec::pending(path, kind, patch)
        };
        let recs = match renames.get(*path) {
            Some(from) => {
                let mut rec = mk(HunkKind::Rename, None);
                rec.old_path = Some(from.clone());
                rec.old = Side::of(base.get(from));
                vec![rec]
            }
            None => {
                let made = diffs.next().unwrap_or_default();
                let rewrite = made.rewrite;
                sized(made.hunks, limits)
                    .into_iter()
                    .map(|(kind, patch, oversized)| {
                        let mut rec = mk(kind, patch);
                        rec.oversized = oversized;
                        rec.rewrite = rewrite && kind == HunkKind::Modify;
                        rec
                    })
                    .collect()
            }
        };
        for (i, mut rec) in recs.into_iter().enumerate() {
            rec.index = i;
            rec.id = format!("{suggestion_id}:{path}:{i}");
            out.push(rec);
        }
    }
    // The suggestion keeps these for as long as the hub runs: no room for more (a hunk is a
    // few hundred bytes, and 100 of them grew a vector of 128).
    out.shrink_to_fit();
    Ok(out)
}

/// What one path's change shows as: its hunks' kinds and patches, as the diff makes them
/// (before [`sized`] cuts them to the limits of the publish).
#[derive(Debug, Clone, Default)]
pub struct PathHunks {
    pub hunks: Vec<(HunkKind, Option<Hunk>)>,
    /// The change rewrote the file ([`is_rewrite`]).
    pub rewrite: bool,
}

fn diff_all(blobs: Blobs<'_>, paths: &[(&str, Sides)]) -> Result<Vec<PathHunks>, StoreError> {
    /// Below this many paths one thread is quicker than starting others.
    const PER_THREAD: usize = 16;
    let threads = hunkgate_sandbox::io_threads()
        .min(paths.len() / PER_THREAD)
        .max(1);
    if threads == 1 {
        let blobs = blobs.on_thread();
        return paths
            .iter()
            .map(|(_, (old, new))| path_hunks(&blobs, *old, *new))
            .collect();
    }
    let parts: Vec<Vec<Result<PathHunks, StoreError>>> =
        hunkgate_sandbox::on_threads((0..threads).collect(), |t| {
            let blobs = blobs.on_thread();
            paths
                .iter()
                .skip(t)
                .step_by(threads)
                .map(|(_, (old, new))| path_hunks(&blobs, *old, *new))
                .collect()
        });
    let mut parts: Vec<_> = parts.into_iter().map(Vec::into_iter).collect();
    (0..paths.len())
        .map(|i| {
            parts[i % threads]
                .next()
                .unwrap_or_else(|| Ok(PathHunks::default()))
        })
        .collect()
}

/// Exact renames: a deleted and an added path with the same blob and mode (new → old path).
fn exact_renames(changed: &Changed) -> BTreeMap<String, String> {
    let deleted: Vec<(&str, &Entry)> = changed
        .iter()
        .filter_map(|(p, (o, n))| match (o, n) {
            (Some(o), None) => Some((*p, *o)),
            _ => None,
        })
        .collect();
    let mut used = BTreeSet::new();
    let mut renames = BTreeMap::new();
    for (p, (o, n)) in changed {
        if let (None, Some(n)) = (o, n) {
            if let Some((from, _)) = deleted
                .iter()
                .find(|(dp, de)| de.oid == n.oid && de.mode == n.mode && !used.contains(dp))
            {
                used.insert(*from);
                renames.insert(p.to_string(), from.to_string());
            }
        }
    }
    renames
}

/// The hunks (kind, line patch) of one path that changed from `old` to `new` (not a rename).
fn path_hunks(
    blobs: &ThreadBlobs<'_>,
    old: Option<&Entry>,
    new: Option<&Entry>,
) -> Result<PathHunks, StoreError> {
    let is_link = |e: Option<&Entry>| e.is_some_and(|e| e.mode == Mode::Symlink);
    if is_link(old) || is_link(new) {
        // A symlink's target is shown as a one-line text; file <-> symlink swaps are
        // whole-entry changes handled by the same record.
        let show = |e: Option<&Entry>| -> Result<String, StoreError> {
            Ok(match e {
                Some(e) => String::from_utf8_lossy(&blobs.read(e.oid)?).into_owned(),
                None => String::new(),
            })
        };
        let (o, n) = (show(old)?, show(new)?);
        let patch = diff_hunks(&o, &n, CONTEXT).into_iter().next();
        return Ok(PathHunks {
            hunks: vec![(HunkKind::Symlink, patch)],
            rewrite: false,
        });
    }
    let old_text = old.map(|e| blobs.text_of(e)).transpose()?;
    let new_text = new.map(|e| blobs.text_of(e)).transpose()?;
    if matches!(old_text, Some(None)) || matches!(new_text, Some(None)) {
        return Ok(PathHunks {
            hunks: vec![(HunkKind::Binary, None)],
            rewrite: false,
        });
    }
    let o = old_text.flatten().unwrap_or_default();
    let n = new_text.flatten().unwrap_or_default();
    let mut rewrite = false;
    let hunks = match (old, new) {
        (None, Some(_)) => vec![(
            HunkKind::Create,
            diff_hunks("", &n, CONTEXT).into_iter().next(),
        )],
        (Some(_), None) => vec![(
            HunkKind::Delete,
            diff_hunks(&o, "", CONTEXT).into_iter().next(),
        )],
        (Some(oe), Some(ne)) => {
            let mut out = Vec::new();
            if oe.mode != ne.mode {
                out.push((HunkKind::Mode, None));
            }
            let lines = diff_hunks(&o, &n, CONTEXT);
            rewrite = is_rewrite(&o, &lines);
            out.extend(lines.into_iter().map(|h| (HunkKind::Modify, Some(h))));
            out
        }
        (None, None) => Vec::new(),
    };
    Ok(PathHunks { hunks, rewrite })
}

/// Longest hunk description kept (it is the agent's text, shown to the user).
pub const MAX_NOTE: usize = 2000;

/// Give hunks the agent's descriptions. A note with a line goes to the hunk of its file whose
/// new side contains that line (or, for a deletion, starts at it); one without goes to every
/// hunk of the file. Several notes on one hunk are joined, in order, without repeats. Notes
/// naming no hunk are returned so the caller can say so.
pub fn attach_notes(hunks: &mut [HunkRec], notes: &[crate::protocol::HunkNote]) -> Vec<String> {
    let mut unmatched = Vec::new();
    for note in notes {
        let text: String = note.description.trim().chars().take(MAX_NOTE).collect();
        if text.is_empty() {
            continue;
        }
        let mut hit = false;
        for h in hunks.iter_mut().filter(|h| h.file == note.file) {
            let covers = match (note.line, &h.patch) {
                (None, _) => true,
                (Some(line), Some(p)) => {
                    let end = p.new_start + p.new_len.max(1);
                    line >= p.new_start.max(1) && line < end
                }
                (Some(_), None) => true,
            };
            if !covers {
                continue;
            }
            hit = true;
            match &mut h.description {
                Some(d) if d.split("\n").any(|l| l == text) => {}
                Some(d) => {
                    d.push('\n');
                    d.push_str(&text);
                }
                None => h.description = Some(text.clone()),
            }
        }
        if !hit {
            unmatched.push(match note.line {
                Some(l) => format!("{}:{l}", note.file),
                None => note.file.clone(),
            });
        }
    }
    unmatched
}

/// Parse an oid stored as text in a record.
pub fn oid(s: &str) -> Option<ObjectId> {
    ObjectId::from_hex(s.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::HunkNote;

    /// The default limits, as a hub without `[review]` settings has them.
    const LIMITS: Limits = Limits {
        lines: crate::model::sizing::DEFAULT_MAX_HUNK_LINES,
        bytes: crate::model::sizing::DEFAULT_MAX_HUNK_BYTES,
    };

    fn rec(file: &str, patch: Option<Hunk>) -> HunkRec {
        HunkRec::pending(file, HunkKind::Modify, patch)
    }

    fn note(file: &str, line: Option<usize>, d: &str) -> HunkNote {
        HunkNote {
            file: file.into(),
            line,
            description: d.into(),
        }
    }

    /// Enough changed files to share the diffs among threads: every hunk is its own file's,
    /// in path order, as one thread diffing path after path makes them.
    #[test]
    fn many_files_are_diffed_apart_and_put_back_in_path_order() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let file = |text: &str| Entry {
            mode: Mode::File,
            oid: store.write_blob(text.as_bytes()).unwrap(),
        };
        let text = |i: usize| -> String { (0..60).map(|l| format!("{i} line {l}\n")).collect() };
        let mut base = FlatTree::new();
        let mut changes = Changes::new();
        for i in 0..70 {
            let path = format!("d{}/f{i:02}.txt", i % 7);
            base.insert(path.clone(), file(&text(i)));
            // 1 to 3 hunks a file; every tenth file deleted, and one moved unchanged.
            let mut new = text(i);
            for h in 0..=(i % 3) {
                new = new.replace(&format!("{i} line {}\n", 5 + 20 * h), "changed\n");
            }
            let now = match i {
                _ if i % 10 == 0 => None,
                _ => Some(file(&new)),
            };
            changes.insert(path, now);
        }
        changes.insert("d0/f07.txt".into(), None);
        changes.insert("moved/f07.txt".into(), Some(base["d0/f07.txt"]));
        changes.insert("new.txt".into(), Some(file("a\nb\n")));
        let hunks = build_hunks(
            Blobs::stored(&store),
            "s",
            &base,
            &changes,
            &|_| true,
            LIMITS,
        )
        .unwrap();
        let mut expected = Vec::new();
        for (path, new) in &changes {
            if path == "d0/f07.txt" {
                continue;
            }
            if path == "moved/f07.txt" {
                expected.push((path.clone(), HunkKind::Rename, None));
                continue;
            }
            for (kind, patch) in path_hunks(
                &Blobs::stored(&store).on_thread(),
                base.get(path),
                new.as_ref(),
            )
            .unwrap()
            .hunks
            {
                expected.push((path.clone(), kind, patch));
            }
        }
        let got: Vec<_> = hunks
            .iter()
            .map(|h| (h.file.clone(), h.kind, h.patch.clone()))
            .collect();
        assert!(
            changes.len() >= 2 * 16,
            "positive control: enough files for threads"
        );
        assert_eq!(got.len(), expected.len());
        assert_eq!(got, expected);
        assert_eq!(
            hunks.iter().filter(|h| h.kind == HunkKind::Delete).count(),
            7
        );
        // Kept as long as the suggestion: no spare room, in the hunks or in their lines.
        assert_eq!(hunks.capacity(), hunks.len());
        for h in &hunks {
            if let Some(p) = &h.patch {
                assert_eq!(p.lines.capacity(), p.lines.len(), "{}", h.id);
            }
        }
    }

    /// A publish diffs the new files its read-back kept in memory: before its batch is
    /// written (the store has none of them yet) the hunks are already exactly those read from
    /// the store afterwards — text, binary and symlink changes alike.
    /// What a reviewer is shown of each hunk: its id, kind and patch.
    fn shown(hunks: &[HunkRec]) -> Vec<(String, HunkKind, Option<Hunk>)> {
        hunks
            .iter()
            .map(|h| (h.id.clone(), h.kind, h.patch.clone()))
            .collect()
    }

    #[test]
    fn hunks_from_kept_contents_are_the_hunks_from_the_store() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let text = |i: usize| -> String { (0..60).map(|l| format!("{i} line {l}\n")).collect() };
        let mut base = FlatTree::new();
        for i in 0..40 {
            let oid = store.write_blob(text(i).as_bytes()).unwrap();
            base.insert(
                format!("f{i:02}.txt"),
                Entry {
                    mode: Mode::File,
                    oid,
                },
            );
        }
        let link = store.write_blob(b"f00.txt").unwrap();
        base.insert(
            "link".into(),
            Entry {
                mode: Mode::Symlink,
                oid: link,
            },
        );
        let mut batch = store.batch().keeping(1 << 20);
        let mut changes = Changes::new();
        for i in 0..40 {
            let new = text(i).replace(&format!("{i} line 30\n"), "changed\n");
            let oid = batch.write_blob(new.as_bytes()).unwrap();
            changes.insert(
                format!("f{i:02}.txt"),
                Some(Entry {
                    mode: Mode::File,
                    oid,
                }),
            );
        }
        let bin = batch.write_blob(b"\0binary\0").unwrap();
        changes.insert(
            "f01.txt".into(),
            Some(Entry {
                mode: Mode::File,
                oid: bin,
            }),
        );
        let target = batch.write_blob(b"f02.txt").unwrap();
        changes.insert(
            "link".into(),
            Some(Entry {
                mode: Mode::Symlink,
                oid: target,
            }),
        );
        let fresh = batch.take_fresh();
        assert!(!store.has_object(target), "not in the store yet");
        let blobs = Blobs {
            store: &store,
            fresh: &fresh,
        };
        let from_memory = build_hunks(blobs, "s", &base, &changes, &|_| true, LIMITS).unwrap();
        batch.finish().unwrap();
        let from_store = build_hunks(
            Blobs::stored(&store),
            "s",
            &base,
            &changes,
            &|_| true,
            LIMITS,
        )
        .unwrap();
        assert_eq!(shown(&from_memory), shown(&from_store));
        let kinds = |k: HunkKind| from_memory.iter().filter(|h| h.kind == k).count();
        assert_eq!(
            (
                kinds(HunkKind::Modify),
                kinds(HunkKind::Binary),
                kinds(HunkKind::Symlink)
            ),
            (39, 1, 1)
        );
    }

    #[test]
    fn notes_land_on_the_hunk_that_holds_their_line() {
        let old: String = (1..=40).map(|i| format!("line {i}\n")).collect();
        let new = old
            .replace("line 5\n", "five\n")
            .replace("line 30\n", "thirty\n");
        let patches = diff_hunks(&old, &new, CONTEXT);
        assert_eq!(patches.len(), 2, "positive control: two separate hunks");
        let mut hunks: Vec<HunkRec> = patches
            .into_iter()
            .map(|p| rec("a.txt", Some(p)))
            .chain([rec("b.bin", None)])
            .collect();
        let unmatched = attach_notes(
            &mut hunks,
            &[
                note("a.txt", Some(30), "spell out thirty"),
                note("a.txt", Some(30), "spell out thirty"),
                note("a.txt", None, "words, not numbers"),
                note("b.bin", Some(3), "binary: whole file"),
                note("a.txt", Some(18), "nowhere"),
                note("c.txt", None, "no such file"),
                note("a.txt", None, "   "),
            ],
        );
        assert_eq!(hunks[0].description.as_deref(), Some("words, not numbers"));
        assert_eq!(
            hunks[1].description.as_deref(),
            Some("spell out thirty\nwords, not numbers")
        );
        assert_eq!(hunks[2].description.as_deref(), Some("binary: whole file"));
        assert_eq!(unmatched, vec!["a.txt:18".to_string(), "c.txt".to_string()]);
    }

    /// A hunk's patch is journaled as its unified-diff text and read back as the same hunk —
    /// CRLF lines and a last line without a newline included; a line hunk journaled before,
    /// as a structure, still reads; a hunk the text cannot carry exactly stays a structure.
    #[test]
    fn a_patch_is_journaled_as_its_diff_text_and_read_back_whole() {
        let old = "a\r\nb\r\nc\nd\ne\nf\ng\nh\ni\nj\nk";
        let new = "a\r\nB\r\nc\nd\ne\nf\ng\nh\ni\nj\nK";
        let patches = diff_hunks(old, new, CONTEXT);
        assert_eq!(patches.len(), 2, "positive control: two hunks");
        for patch in patches {
            let text = patch.to_unified();
            let hunk = rec("a.txt", Some(patch));
            let json = serde_json::to_value(&hunk).unwrap();
            assert_eq!(json["patch"], serde_json::Value::String(text));
            let back: HunkRec = serde_json::from_value(json).unwrap();
            assert_eq!(back.patch, hunk.patch);
            // The structure, as older journals hold it.
            let mut old_form = serde_json::to_value(&hunk).unwrap();
            old_form["patch"] = serde_json::to_value(hunk.patch.as_ref().unwrap()).unwrap();
            assert!(old_form["patch"]["lines"].is_array());
            let back: HunkRec = serde_json::from_value(old_form).unwrap();
            assert_eq!(back.patch, hunk.patch);
        }
        // No patch at all, and an explicit null.
        let none = serde_json::to_value(rec("b.bin", None)).unwrap();
        assert!(none.get("patch").is_none());
        let mut null = none.clone();
        null["patch"] = serde_json::Value::Null;
        for v in [none, null] {
            assert_eq!(serde_json::from_value::<HunkRec>(v).unwrap().patch, None);
        }
        // Counts that are not its lines': the text would read back otherwise (or not at all).
        let mut odd = diff_hunks("x\n", "y\n", CONTEXT).remove(0);
        assert!(patch_text::carried_by_text(&odd), "positive control");
        odd.old_len = 5;
        assert!(!patch_text::carried_by_text(&odd));
        let json = serde_json::to_value(rec("c.txt", Some(odd.clone()))).unwrap();
        assert!(json["patch"].is_object());
        let back: HunkRec = serde_json::from_value(json).unwrap();
        assert_eq!(back.patch, Some(odd));
        // Text that is not one hunk is an error, not a guess.
        let mut two = serde_json::to_value(rec("d.txt", None)).unwrap();
        two["patch"] = "@@ -1 +1 @@\n-a\n+b\n@@ -5 +5 @@\n-c\n+d\n".into();
        assert!(serde_json::from_value::<HunkRec>(two).is_err());
    }

    #[test]
    fn a_sides_object_id_is_journaled_as_its_hex_digits_and_nothing_else_is_read_as_one() {
        let text = r#"{"id":"s:a:0","file":"a","index":0,"kind":"modify","state":"pending","old":{"mode":"file","oid":"bab081fdb7372d4e471fcbb12b886e1a7cddcae2"},"new":{"mode":"executable","oid":"1ca9f03dcc29c445823ed25c510f44b3bfed2516"}}"#;
        let h: HunkRec = serde_json::from_str(text).unwrap();
        let old = h.old.as_ref().unwrap();
        assert_eq!(
            old.oid,
            ObjectId::from_hex(b"bab081fdb7372d4e471fcbb12b886e1a7cddcae2").unwrap()
        );
        assert_eq!(h.new.as_ref().unwrap().mode, Mode::Executable);
        // Written back exactly as it was read: the journal's format is git's hex.
        assert_eq!(serde_json::to_string(&h).unwrap(), text);
        for bad in [
            "bab081fdb7372d4e471fcbb12b886e1a7cddcae",
            "bab081fdb7372d4e471fcbb12b886e1a7cddcaeg",
            "",
        ] {
            let e = serde_json::from_str::<HunkRec>(
                &text.replace("bab081fdb7372d4e471fcbb12b886e1a7cddcae2", bad),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(&format!("object id {bad:?}")), "{e}");
        }
        let number = text.replace(r#""bab081fdb7372d4e471fcbb12b886e1a7cddcae2""#, "7");
        let e = serde_json::from_str::<HunkRec>(&number).unwrap_err();
        assert!(
            e.to_string().contains("an object id of 40 hex digits"),
            "{e}"
        );
    }

    #[test]
    fn destructive_are_deletions_renames_mode_changes_and_large_deletions() {
        let side = Some(Side {
            mode: Mode::File,
            oid: ObjectId::from_hex(b"0123456789012345678901234567890123456789").unwrap(),
        });
        let removing = |n: usize| {
            let body: String = (0..n).map(|i| format!("-gone {i}\n")).collect();
            hunkgate_patch::parse_hunks(&format!("@@ -1,{n} +0,0 @@\n{body}")).unwrap()[0].clone()
        };
        let mut edit = rec("edit.txt", Some(removing(3)));
        edit.old = side.clone();
        edit.new = side.clone();
        let mut big = rec("big.txt", Some(removing(4)));
        big.old = side.clone();
        big.new = side.clone();
        let mut deleted = rec("gone.txt", Some(removing(1)));
        deleted.kind = HunkKind::Delete;
        deleted.old = side.clone();
        let mut binary_gone = rec("img.bin", None);
        binary_gone.kind = HunkKind::Binary;
        binary_gone.old = side.clone();
        let mut binary_changed = binary_gone.clone();
        binary_changed.new = side.clone();
        let mut moved = rec("new.txt", None);
        moved.kind = HunkKind::Rename;
        moved.old_path = Some("old.txt".into());
        moved.old = side.clone();
        moved.new = side.clone();
        let mut chmod = rec("run.sh", None);
        chmod.kind = HunkKind::Mode;
        chmod.old = side.clone();
        chmod.new = side.clone();
        let mut created = rec("new.rs", None);
        created.kind = HunkKind::Create;
        created.new = side.clone();
        let mut hunks = vec![
            edit,
            big,
            deleted,
            binary_gone,
            binary_changed,
            moved,
            chmod,
            created,
        ];
        mark_destructive(&mut hunks, 3);
        let why: Vec<Option<String>> = hunks.iter().map(HunkRec::destructive_why).collect();
        assert_eq!(
            why,
            vec![
                None,
                Some("deletes 4 lines of big.txt".into()),
                Some("deletes gone.txt".into()),
                Some("deletes img.bin".into()),
                None,
                Some("renames old.txt to new.txt".into()),
                Some("changes the mode of run.sh".into()),
                None,
            ]
        );
        assert!(hunks.iter().all(|h| h.view().destructive == h.destructive));
        // Journaled only when set, read back as it was.
        let text = serde_json::to_string(&hunks[1]).unwrap();
        assert!(text.contains("\"destructive\":true"), "{text}");
        let back: HunkRec = serde_json::from_str(&text).unwrap();
        assert!(back.destructive);
        assert!(!serde_json::to_string(&hunks[0])
            .unwrap()
            .contains("destructive"));
    }
}
