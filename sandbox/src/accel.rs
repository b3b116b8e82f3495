//! The accelerators that stay, and an off switch for each (`[accel]` in the hub's config, or
//! `HUNKGATE_ACCEL_OFF`), like jj's `fsmonitor.backend = "none"`: each one is a fast path
//! beside a slow one that is the correctness baseline, and with its switch off the hub takes
//! the slow path, so what the accelerator saves can be measured (docs/performance.md) and a
//! suspected defect in it ruled out.
//!
//! **Layer: a leaf.** It imports nothing of the crate.

use serde::Deserialize;

/// Which accelerators are on. Every one is by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Accel {
    /// Change notification (inotify, git's fsmonitor idea): the checkout's snapshot, a
    /// slot's read-back and its next sync look only where something happened. Off: they
    /// `lstat` every file.
    pub watch: bool,
    /// Under `--isolation user`: the read-back helper started as a run's sync begins, which
    /// reads its request while the agent works and, watching, looks only where something
    /// happened; and, kept for the slot, makes the slot's next sync itself, sent only what
    /// changed. Off: every sync and every read-back starts a helper of its own and sends it
    /// the whole base.
    pub kept_helper: bool,
    /// The directory stat record of a sync (git's untracked cache): a read-back reads again
    /// only the directories whose stat shows an entry added or removed. Off: it reads every
    /// directory for new files. The watch vouches against that record, so with this off a
    /// slot's watch is not used either.
    pub untracked_cache: bool,
    /// A batch of more than [`crate::store::ObjectBatch::PACK_AT`] new objects (a first
    /// snapshot of a checkout, a large publish) is written as one pack. Off: every object is
    /// written loose, as `git add` writes them.
    pub pack: bool,
}

impl Default for Accel {
    fn default() -> Self {
        Accel::ALL
    }
}

impl Accel {
    /// Every accelerator on.
    pub const ALL: Accel = Accel {
        watch: true,
        kept_helper: true,
        untracked_cache: true,
        pack: true,
    };

    /// Every accelerator off: the slow paths only.
    pub const NONE: Accel = Accel {
        watch: false,
        kept_helper: false,
        untracked_cache: false,
        pack: false,
    };

    /// The names of the switches, as the config and `HUNKGATE_ACCEL_OFF` spell them.
    pub const NAMES: &[&str] = &["watch", "kept_helper", "untracked_cache", "pack"];

    /// These settings with the accelerators named in `list` turned off: names separated by
    /// commas (or spaces), `all` for every one, empty for none. An unknown name is an error
    /// that lists the known ones.
    pub fn turn_off(mut self, list: &str) -> Result<Accel, String> {
        for name in list
            .split([',', ' '])
            .map(str::trim)
            .filter(|n| !n.is_empty())
        {
            match name {
                "all" => self = Accel::NONE,
                "watch" => self.watch = false,
                "kept_helper" => self.kept_helper = false,
                "untracked_cache" => self.untracked_cache = false,
                "pack" => self.pack = false,
                other => {
                    return Err(format!(
                        "unknown accelerator {other:?}: use {} or all",
                        Accel::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(self)
    }

    /// The names of the accelerators that are off, for the log.
    pub fn off(&self) -> Vec<&'static str> {
        let on = [
            self.watch,
            self.kept_helper,
            self.untracked_cache,
            self.pack,
        ];
        Accel::NAMES
            .iter()
            .zip(on)
            .filter(|(_, on)| !on)
            .map(|(n, _)| *n)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_are_turned_off_by_name() {
        assert_eq!(Accel::default(), Accel::ALL);
        assert!(Accel::ALL.off().is_empty());
        let off = Accel::ALL.turn_off("watch, pack").unwrap();
        assert_eq!(
            off,
            Accel {
                watch: false,
                pack: false,
                ..Accel::ALL
            }
        );
        assert_eq!(off.off(), ["watch", "pack"]);
        assert_eq!(Accel::ALL.turn_off("all").unwrap(), Accel::NONE);
        assert_eq!(Accel::NONE.off(), Accel::NAMES);
        assert_eq!(Accel::ALL.turn_off("").unwrap(), Accel::ALL);
        let e = Accel::ALL.turn_off("watch,fsmonitor").unwrap_err();
        assert!(
            e.contains("\"fsmonitor\"") && e.contains("kept_helper"),
            "{e}"
        );
    }

    #[test]
    fn the_settings_name_each_switch_and_default_to_on() {
        let a: Accel = serde_json::from_str(r#"{"watch": false, "kept_helper": false}"#).unwrap();
        assert_eq!(a.off(), ["watch", "kept_helper"]);
        assert!(serde_json::from_str::<Accel>(r#"{"wtach": false}"#).is_err());
    }
}
