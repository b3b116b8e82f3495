//! Command templates: a template and a prompt turned into argv, the prompt passed as one
//! word, or through an environment variable to code run by a shell or interpreter.

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    #[error("agent template {0:?} is empty")]
    Empty(String),
    #[error("agent template {template:?} cannot be split into words: {message}")]
    Syntax { template: String, message: String },
    #[error("agent template {template:?} puts {{prompt}} inside {what}, where hunkgate cannot keep it from being run as code: pass {{prompt}} as an argument of its own (e.g. `sh -c '... \"$1\" ...' sh {{prompt}}`) or read the prompt from the HUNKGATE_PROMPT environment variable (`sh -c '... \"$HUNKGATE_PROMPT\" ...'`)")]
    PromptInCode { template: String, what: String },
}

/// Shells whose `-c` script hunkgate rewrites so the prompt is never part of the script.
pub(super) const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "busybox"];
/// Shells with other quoting rules: a `{prompt}` in their script is refused.
pub(super) const OTHER_SHELLS: &[&str] = &["fish", "csh", "tcsh", "nu", "pwsh", "elvish"];
/// Interpreters whose `-c`/`-e` argument is code: a `{prompt}` inside it is refused.
pub(super) const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "perl", "ruby", "node", "nodejs", "deno", "bun", "php", "lua",
];

/// The environment variable every agent gets with the prompt in it (see [`build_argv`]).
pub const PROMPT_VAR: &str = "HUNKGATE_PROMPT";

/// Turn a template such as `aider --yes-always --message {prompt}` into argv.
///
/// The template is split like a POSIX shell would split it (quotes respected), but it is never
/// run through a shell unless it names one itself. `{prompt}` is replaced inside each word, so the
/// prompt is always exactly one argument, whatever it contains.
///
/// When the template runs a shell script (`sh -c '…'`, also `sh -c -- '…'`, `bash -lc '…'`,
/// `env sh -c '…'`, `timeout 60 sh -c '…'`), the prompt never becomes part of the script:
/// `{prompt}` there is replaced by a reference to the `HUNKGATE_PROMPT` environment variable,
/// quoted for where it stands (`"${HUNKGATE_PROMPT}"` unquoted, `${HUNKGATE_PROMPT}` inside
/// double quotes, `'"${HUNKGATE_PROMPT}"'` inside single quotes). The shell expands it as one
/// piece of text, so backticks, `$(…)`, quotes and newlines in a prompt stay text. The caller
/// must put the prompt in that variable (the hub always does). A `{prompt}` inside the code
/// argument of another interpreter (`python -c`, `perl -e`, `fish -c`, …) is refused.
pub fn build_argv(template: &str, prompt: &str) -> Result<Vec<String>, TemplateError> {
    let words = shell_words::split(template).map_err(|e| TemplateError::Syntax {
        template: template.to_string(),
        message: e.to_string(),
    })?;
    if words.is_empty() {
        return Err(TemplateError::Empty(template.to_string()));
    }
    let code = code_words(&words);
    let mut out = Vec::with_capacity(words.len());
    for (i, word) in words.iter().enumerate() {
        let replaced = match code.iter().find(|(j, _)| *j == i) {
            Some((_, CodeKind::PosixScript)) => posix_script_with_prompt_var(word),
            Some((_, CodeKind::Refused(what))) if word.contains("{prompt}") => {
                return Err(TemplateError::PromptInCode {
                    template: template.to_string(),
                    what: what.clone(),
                });
            }
            _ => word.replace("{prompt}", prompt),
        };
        out.push(replaced);
    }
    Ok(out)
}

pub(super) enum CodeKind {
    /// A POSIX shell's `-c` script.
    PosixScript,
    /// Code for something whose quoting hunkgate does not rewrite.
    Refused(String),
}

pub(super) fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or("")
}

/// Which words of `words` are code run by a shell or an interpreter (`sh -c <code>`).
pub(super) fn code_words(words: &[String]) -> Vec<(usize, CodeKind)> {
    let mut out = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let name = basename(word);
        // `python3.12` is python.
        let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        let (posix, other, interp) = (
            SHELLS.contains(&name),
            OTHER_SHELLS.contains(&name),
            INTERPRETERS.contains(&name) || INTERPRETERS.contains(&stem),
        );
        if !(posix || other || interp) {
            continue;
        }
        // `busybox sh -c`: the next word is the shell.
        if name == "busybox" {
            continue;
        }
        match code_argument(words, i + 1, interp) {
            CodeArg::Inline(j) => {
                out.push((j, CodeKind::Refused(format!("the code argument of {name}"))));
            }
            CodeArg::Word(j) => {
                let kind = if posix {
                    CodeKind::PosixScript
                } else {
                    CodeKind::Refused(format!("the script of {name}"))
                };
                out.push((j, kind));
            }
            CodeArg::None => {}
        }
    }
    out
}

/// Where the code is in a shell's or interpreter's arguments.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum CodeArg {
    /// No code flag, or nothing after it.
    None,
    /// In the code flag's own word, at this index (`python -cCODE`, `perl -eCODE`).
    Inline(usize),
    /// The word at this index.
    Word(usize),
}

/// Scan the options of a shell (or, with `interp`, an interpreter) that start at `words[from]`
/// for its code flag (`-c`, `--command`; also `-e`/`-E` for interpreters) and say where the
/// code is.
pub(super) fn code_argument(words: &[String], from: usize, interp: bool) -> CodeArg {
    let mut j = from;
    let mut code_flag = false;
    while let Some(w) = words.get(j) {
        if w == "--" {
            j += 1;
            break;
        }
        let short = (w.starts_with('-') || w.starts_with('+')) && !w.starts_with("--");
        if w.starts_with("--") {
            // Long options; these take a value.
            if matches!(w.as_str(), "--rcfile" | "--init-file" | "--command") {
                if w == "--command" {
                    code_flag = true;
                    j += 1;
                    break;
                }
                j += 1;
            }
            j += 1;
            continue;
        }
        if !short || w.len() < 2 {
            break;
        }
        let flags = &w[1..];
        let is_code = if interp {
            flags.contains('c') || flags.contains('e') || flags.contains('E')
        } else {
            flags.contains('c')
        };
        if is_code {
            code_flag = true;
            // `perl -e CODE`, `python -cCODE`: the code may follow in the same word.
            if interp {
                let pos = flags.find(['c', 'e', 'E']).unwrap_or(0);
                if pos + 1 < flags.len() {
                    return CodeArg::Inline(j);
                }
            }
            j += 1;
            if interp {
                break;
            }
            continue;
        }
        // `-o pipefail`, `-O extglob`: the option's value is the next word.
        if !interp && (flags.ends_with('o') || flags.ends_with('O')) {
            j += 1;
        }
        j += 1;
    }
    if code_flag && j < words.len() {
        CodeArg::Word(j)
    } else {
        CodeArg::None
    }
}

/// Where a character of a POSIX shell script stands.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Ctx {
    /// Top level, `$( … )` or `` ` … ` ``: plain shell words.
    Plain,
    Subshell,
    Backtick,
    Single,
    /// `$'…'`: single-quoted with backslash escapes.
    AnsiC,
    Double,
}

/// Replace each `{prompt}` in a POSIX shell script by a reference to [`PROMPT_VAR`], quoted for
/// the context it stands in. The prompt's text itself never enters the script.
pub(super) fn posix_script_with_prompt_var(script: &str) -> String {
    let unquoted = format!("\"${{{PROMPT_VAR}}}\"");
    let in_double = format!("${{{PROMPT_VAR}}}");
    let in_single = format!("'\"${{{PROMPT_VAR}}}\"'");
    let mut stack = vec![Ctx::Plain];
    let mut out = String::with_capacity(script.len() + 32);
    let mut rest = script;
    while let Some(c) = rest.chars().next() {
        let top = *stack.last().unwrap_or(&Ctx::Plain);
        if let Some(after) = rest.strip_prefix("{prompt}") {
            out.push_str(match top {
                Ctx::Plain | Ctx::Subshell | Ctx::Backtick => &unquoted,
                Ctx::Double => &in_double,
                Ctx::Single | Ctx::AnsiC => &in_single,
            });
            rest = after;
            continue;
        }
        let take = step_quoting(&mut stack, top, c, rest);
        out.push_str(&rest[..take]);
        rest = &rest[take..];
        if stack.is_empty() {
            stack.push(Ctx::Plain);
        }
    }
    out
}

/// Follow the quoting context over `c`, the first character of `rest` (`top` is the current
/// context): pop the context it closes or push the one it opens. Returns how many bytes of
/// `rest` go as they are (the character, with what it escapes or the rest of its opener).
pub(super) fn step_quoting(stack: &mut Vec<Ctx>, top: Ctx, c: char, rest: &str) -> usize {
    let mut take = c.len_utf8();
    match (top, c) {
        (Ctx::Single, '\'') | (Ctx::AnsiC, '\'') | (Ctx::Double, '"') => {
            stack.pop();
        }
        (Ctx::Backtick, '`') => {
            stack.pop();
        }
        (Ctx::Subshell, ')') => {
            stack.pop();
        }
        (Ctx::Single, _) => {}
        (_, '\\') => {
            // The escaped character is taken as it is.
            take += rest[1..].chars().next().map_or(0, char::len_utf8);
        }
        (Ctx::Double, '$') if rest[1..].starts_with('(') => {
            stack.push(Ctx::Subshell);
            take += 1;
        }
        (Ctx::Double, '`') => stack.push(Ctx::Backtick),
        (Ctx::Double, _) | (Ctx::AnsiC, _) => {}
        (_, '$') if rest[1..].starts_with('(') => {
            stack.push(Ctx::Subshell);
            take += 1;
        }
        (_, '$') if rest[1..].starts_with('\'') => {
            stack.push(Ctx::AnsiC);
            take += 1;
        }
        (_, '\'') => stack.push(Ctx::Single),
        (_, '"') => stack.push(Ctx::Double),
        (_, '`') => stack.push(Ctx::Backtick),
        (Ctx::Subshell, '(') => stack.push(Ctx::Subshell),
        _ => {}
    }
    take
}
