//! Line-range decisions in a replay. A hunk decided in part (feedback outcome `partial`) leaves
//! what it did not decide as a hunk of its own, its *rest* (`<hunk>~a<first>-<last>` after an
//! accept, `~r<first>-<last>` after a reject; protocol.md, "Deciding part of a hunk"), decided
//! in turn, in part again or whole. Followed from the agent's hunk through its rests, the log
//! says exactly which of the hunk's changed lines the user kept, which they rejected, and what
//! the lines of the base the hunk covers became.
//!
//! The rests are rebuilt here with the hub's own [`split_hunk`] from the reviewed diff and each
//! decision's range, and checked against the rests the log names: a log this cannot follow is
//! an error for the run, never a guess.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use hunkgate_patch::{parse_hunks, split_hunk, Hunk, HunkLine, Pick};

use super::Record;

/// The id of the hunk whose line-range decision left `hunk_id` as its rest, if it is one.
pub(super) fn parent_of(hunk_id: &str) -> Option<&str> {
    let (parent, tail) = hunk_id.rsplit_once('~')?;
    let range = tail.strip_prefix('a').or_else(|| tail.strip_prefix('r'))?;
    let (first, last) = range.split_once('-')?;
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (number(first) && number(last)).then_some(parent)
}

/// What became of an agent's hunk decided in part, and of its rests.
#[derive(Debug, Default)]
pub(super) struct Family {
    /// From the hunk's old side (lines of the base) to what the user kept there; None when
    /// nothing was kept.
    pub kept: Option<Hunk>,
    /// The hunk with only the changes the user rejected; None when none was.
    pub rejected: Option<Hunk>,
    /// The changed lines kept (`+text` / `-text`, as [`super::units_of_hunk`] names them; a
    /// rest the user modified counts in their version).
    pub kept_changes: Vec<String>,
    /// The changed lines rejected.
    pub rejected_changes: Vec<String>,
}

/// Where a changed line of the agent's hunk ended.
#[derive(Clone, Copy, PartialEq)]
enum Fate {
    Open,
    Kept,
    Rejected,
}

/// Follow `root` (a decided hunk whose outcome is `partial`) through the rests in `decided`.
pub(super) fn follow(root: &Record, decided: &BTreeMap<String, Record>) -> Result<Family> {
    let orig = one_hunk(&root.diff, &root.hunk_id)?;
    let mut fam = Family::default();
    let mut fate = vec![Fate::Open; orig.lines.len()];
    // For each line of the agent's hunk, its position among the current hunk's lines.
    let mut at: Vec<Option<usize>> = (0..orig.lines.len()).map(Some).collect();
    let mut region: Vec<String> = old_side(&orig);
    let mut current = orig.clone();
    let (mut rec, mut id) = (root, root.hunk_id.clone());
    loop {
        let whole = |fam: &mut Family, fate: &mut [Fate], to: Fate| {
            for (i, p) in at.iter().enumerate() {
                if let Some(p) = *p {
                    mark(fam, fate, i, &orig, &current.lines[p], to);
                }
            }
        };
        match rec.outcome.as_str() {
            "applied" | "merged" => {
                whole(&mut fam, &mut fate, Fate::Kept);
                region = new_side(&current);
                break;
            }
            "modified" => {
                let d = rec.modified_diff.as_deref().unwrap_or(&rec.diff);
                let mine = one_hunk(d, &rec.hunk_id)?;
                fam.kept_changes.extend(changes(&mine.lines));
                region = new_side(&mine);
                break;
            }
            "rejected" => {
                whole(&mut fam, &mut fate, Fate::Rejected);
                break;
            }
            "partial" => {}
            other => bail!(
                "hunk {}: outcome {other:?} in a line-range decision",
                rec.hunk_id
            ),
        }
        let [first, last] = rec
            .lines
            .ok_or_else(|| anyhow!("hunk {}: a partial decision without `lines`", rec.hunk_id))?;
        let (pick, to, tag) = match rec.action.as_str() {
            "accept" => (Pick::Accept, Fate::Kept, 'a'),
            "reject" => (Pick::Reject, Fate::Rejected, 'r'),
            other => bail!("hunk {}: a partial {other:?}", rec.hunk_id),
        };
        let split = split_hunk(&current, first, last, pick)
            .map_err(|e| anyhow!("hunk {}: lines {first}-{last}: {e}", rec.hunk_id))?;
        for (i, pos) in at.iter_mut().enumerate() {
            let Some(p) = *pos else { continue };
            if (first - 1..last).contains(&p) {
                mark(&mut fam, &mut fate, i, &orig, &current.lines[p], to);
            }
            *pos = split.moved[p];
        }
        if let Some(landed) = &split.landed {
            region = new_side(landed);
        }
        let Some(rest) = split.rest else { break };
        let rest_id = format!("{id}~{tag}{first}-{last}");
        let Some(next) = decided.get(&rest_id) else {
            break;
        };
        if one_hunk(&next.diff, &rest_id)?.lines != rest.lines {
            bail!("hunk {rest_id}: the log's rest is not what deciding lines {first}-{last} of {id} leaves");
        }
        (current, rec, id) = (rest, next, rest_id);
    }
    fam.kept = (region != old_side(&orig)).then(|| replacing(&orig, region));
    fam.rejected = fate
        .contains(&Fate::Rejected)
        .then(|| only(&orig, &fate, Fate::Rejected));
    Ok(fam)
}

/// Record that line `i` of `orig` (shown as `line` in the current hunk) went `to`, if it is a
/// change.
fn mark(fam: &mut Family, fate: &mut [Fate], i: usize, orig: &Hunk, line: &HunkLine, to: Fate) {
    if matches!(orig.lines[i], HunkLine::Context(_)) || fate[i] != Fate::Open {
        return;
    }
    fate[i] = to;
    let list = match to {
        Fate::Kept => &mut fam.kept_changes,
        _ => &mut fam.rejected_changes,
    };
    list.extend(changes(std::slice::from_ref(line)));
}

/// The `+text` / `-text` of the changed lines among `lines`.
fn changes(lines: &[HunkLine]) -> impl Iterator<Item = String> + '_ {
    lines.iter().filter_map(|l| match l {
        HunkLine::Add(t) => Some(format!("+{t}")),
        HunkLine::Remove(t) => Some(format!("-{t}")),
        HunkLine::Context(_) => None,
    })
}

fn one_hunk(diff: &str, id: &str) -> Result<Hunk> {
    let mut hunks = parse_hunks(diff).map_err(|e| anyhow!("hunk {id}: unreadable diff: {e}"))?;
    match hunks.len() {
        1 => Ok(hunks.remove(0)),
        n => bail!("hunk {id}: {n} hunks in one diff"),
    }
}

fn old_side(h: &Hunk) -> Vec<String> {
    h.old_lines().into_iter().map(str::to_string).collect()
}

fn new_side(h: &Hunk) -> Vec<String> {
    h.new_lines().into_iter().map(str::to_string).collect()
}

/// `orig`'s old side replaced by `region`, as one hunk at `orig`'s place.
fn replacing(orig: &Hunk, region: Vec<String>) -> Hunk {
    let old = old_side(orig);
    Hunk {
        old_start: orig.old_start,
        old_len: old.len(),
        new_start: orig.new_start,
        new_len: region.len(),
        lines: old
            .into_iter()
            .map(HunkLine::Remove)
            .chain(region.into_iter().map(HunkLine::Add))
            .collect(),
    }
}

/// `orig` with only its changed lines whose fate is `keep` (lazygit's rule: another `-` line
/// stays as context, another `+` line is left out).
fn only(orig: &Hunk, fate: &[Fate], keep: Fate) -> Hunk {
    let lines: Vec<HunkLine> = orig
        .lines
        .iter()
        .zip(fate)
        .filter_map(|(l, f)| match l {
            HunkLine::Remove(t) if *f != keep => Some(HunkLine::Context(t.clone())),
            HunkLine::Add(_) if *f != keep => None,
            other => Some(other.clone()),
        })
        .collect();
    let new_len = lines
        .iter()
        .filter(|l| !matches!(l, HunkLine::Remove(_)))
        .count();
    Hunk {
        old_start: orig.old_start,
        old_len: orig.old_len,
        new_start: orig.new_start,
        new_len,
        lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::tests::rec;

    /// The base `l1`..`l10`; the agent's hunk turns `l4`..`l6` into `L4`..`L6`: its lines are
    /// ` l1 l2 l3 -l4 -l5 -l6 +L4 +L5 +L6 l7 l8 l9` (positions 1-12).
    fn base() -> String {
        (1..=10).map(|i| format!("l{i}\n")).collect()
    }

    fn agent() -> Record {
        let diff = "@@ -1,9 +1,9 @@\n l1\n l2\n l3\n-l4\n-l5\n-l6\n+L4\n+L5\n+L6\n l7\n l8\n l9\n";
        let mut r = rec("f", "modify", diff);
        r.hunk_id = "s:f:0".into();
        r
    }

    /// The log's lines for deciding `lines` of `of` with `action` (what the hub logs), and the
    /// rest it leaves as a pending hunk of its own, with `outcome`.
    fn part(of: &Record, action: &str, lines: [usize; 2], rest: &str) -> (Record, Record) {
        let h = one_hunk(&of.diff, &of.hunk_id).unwrap();
        let pick = if action == "accept" {
            Pick::Accept
        } else {
            Pick::Reject
        };
        let split = split_hunk(&h, lines[0], lines[1], pick).unwrap();
        let mut r = of.clone();
        (r.outcome, r.action, r.lines) = ("partial".into(), action.into(), Some(lines));
        let tag = &action[..1];
        let mut next = rec("f", "modify", &split.rest.unwrap().to_unified());
        next.hunk_id = format!("{}~{tag}{}-{}", of.hunk_id, lines[0], lines[1]);
        next.outcome = rest.into();
        (r, next)
    }

    fn after(base: &str, h: &Option<Hunk>) -> String {
        match h {
            Some(h) => hunkgate_patch::apply_all(base, std::slice::from_ref(h)).unwrap(),
            None => base.to_string(),
        }
    }

    #[test]
    fn rests_are_named_by_their_range() {
        assert_eq!(parent_of("s:f:0~a3-7"), Some("s:f:0"));
        assert_eq!(parent_of("s:f:0~a3-7~r1-2"), Some("s:f:0~a3-7"));
        assert_eq!(parent_of("s:a~b.txt:0"), None, "a ~ in a file name");
        assert_eq!(parent_of("s:f:0~x3-7"), None);
        assert_eq!(parent_of("s:f:0~a3-"), None);
    }

    /// Lines 4 and 7 (`-l4`, `+L4`) accepted, then the rest accepted whole: everything is kept,
    /// the file is the agent's, nothing is rejected.
    #[test]
    fn an_accepted_part_and_its_accepted_rest_keep_the_whole_hunk() {
        let (first, rest) = part(&agent(), "accept", [4, 7], "applied");
        // A range of one `-` and one `+` line that are not next to each other: 4-7 holds
        // -l4 -l5 -l6 +L4, all four decided.
        let decided = BTreeMap::from([
            (first.hunk_id.clone(), first.clone()),
            (rest.hunk_id.clone(), rest),
        ]);
        let fam = follow(&first, &decided).unwrap();
        let agents = "l1\nl2\nl3\nL4\nL5\nL6\nl7\nl8\nl9\nl10\n";
        assert_eq!(after(&base(), &fam.kept), agents);
        assert_eq!(fam.kept_changes.len(), 6, "{:?}", fam.kept_changes);
        assert!(fam.rejected.is_none() && fam.rejected_changes.is_empty());
    }

    /// `-l5` and `+L5` (lines 5 and 8) rejected by a range each, the rest accepted: `l5` stays,
    /// `l4` and `l6` become the agent's; the rejected part alone removes `l5` and adds `L5`.
    #[test]
    fn rejected_parts_stay_out_of_what_is_kept() {
        let (first, rest) = part(&agent(), "reject", [5, 5], "partial");
        // The rest's lines: ` l1 l2 l3 -l4 l5 -l6 +L4 +L5 +L6 l7 l8 l9`: `+L5` is line 8.
        let (second, rest2) = part(&rest, "reject", [8, 8], "applied");
        let decided = BTreeMap::from([
            (first.hunk_id.clone(), first.clone()),
            (second.hunk_id.clone(), second),
            (rest2.hunk_id.clone(), rest2),
        ]);
        let fam = follow(&first, &decided).unwrap();
        // `l5`, kept, is context between the removed lines, so it comes before the added ones
        // (what the hub lands for these decisions).
        assert_eq!(
            after(&base(), &fam.kept),
            "l1\nl2\nl3\nl5\nL4\nL6\nl7\nl8\nl9\nl10\n"
        );
        assert_eq!(fam.rejected_changes, ["-l5\n", "+L5\n"]);
        assert_eq!(
            after(&base(), &fam.rejected),
            "l1\nl2\nl3\nl4\nl6\nL5\nl7\nl8\nl9\nl10\n"
        );
        assert_eq!(fam.kept_changes, ["-l4\n", "-l6\n", "+L4\n", "+L6\n"]);
    }

    /// A part accepted and its rest still pending: only the part is kept.
    #[test]
    fn an_undecided_rest_is_neither_kept_nor_rejected() {
        let (first, _) = part(&agent(), "accept", [4, 4], "applied");
        let decided = BTreeMap::from([(first.hunk_id.clone(), first.clone())]);
        let fam = follow(&first, &decided).unwrap();
        assert_eq!(
            after(&base(), &fam.kept),
            "l1\nl2\nl3\nl5\nl6\nl7\nl8\nl9\nl10\n"
        );
        assert_eq!(fam.kept_changes, ["-l4\n"]);
        assert!(fam.rejected.is_none());
    }

    /// A rest the log names that is not what the decision leaves is an error, not a guess.
    #[test]
    fn a_rest_that_does_not_follow_is_refused() {
        let (first, mut rest) = part(&agent(), "accept", [4, 4], "applied");
        // Positive control: as logged, it follows.
        let ok = BTreeMap::from([
            (first.hunk_id.clone(), first.clone()),
            (rest.hunk_id.clone(), rest.clone()),
        ]);
        assert!(follow(&first, &ok).is_ok());
        rest.diff = rest.diff.replace("+L5", "+X5");
        let bad = BTreeMap::from([
            (first.hunk_id.clone(), first.clone()),
            (rest.hunk_id.clone(), rest),
        ]);
        let e = follow(&first, &bad).unwrap_err().to_string();
        assert!(e.contains("is not what deciding lines 4-4"), "{e}");
    }
}
