//! One exchange with a short-lived helper: its pipes (taken, widened), its stderr, and the
//! verdict on what it answered and how it ended.

use super::*;

/// A helper process and its stdin, stdout and stderr.
pub(super) type Helper = (
    std::process::Child,
    std::process::ChildStdin,
    std::process::ChildStdout,
    std::process::ChildStderr,
);

/// The helper's three pipes; a helper started without them is killed and reaped.
pub(super) fn take_pipes(
    child: &mut std::process::Child,
    op: &'static str,
) -> Result<
    (
        std::process::ChildStdin,
        std::process::ChildStdout,
        std::process::ChildStderr,
    ),
    HelperError,
> {
    match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
        (Some(a), Some(b), Some(c)) => Ok((a, b, c)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err(HelperError::Protocol {
                op,
                message: "no pipes to the helper".into(),
            })
        }
    }
}

/// What a helper's stdin and stdout pipes are widened to (see [`widen_pipe`]).
pub(super) const PIPE_BYTES: i32 = 1 << 20;

/// Let a pipe to a helper hold [`PIPE_BYTES`] rather than Linux's default 64 KiB, so that a
/// read-back's megabyte of frames, or a sync's blobs, goes through with a few switches
/// between the two processes rather than one per 64 KiB. Best effort: a pipe that cannot be
/// widened (past `/proc/sys/fs/pipe-max-size`, or over the user's pipe quota) works as it is.
pub(super) fn widen_pipe(fd: &impl std::os::fd::AsFd) {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES)) {
        tracing::debug!(error = %e, "a pipe to the helper keeps its size");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
}

/// The first 64 KiB of the helper's stderr, trimmed; the rest is read and dropped.
pub(super) fn read_helper_stderr(mut stderr: std::process::ChildStderr) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut buf);
    // Keep draining so the helper never blocks on a full stderr pipe.
    let _ = std::io::copy(&mut stderr, &mut std::io::sink());
    String::from_utf8_lossy(&buf).trim().to_string()
}

/// The exchange's result from what `read` made of stdout and how feeding stdin went: the
/// reader's error first, then the writer's.
pub(super) fn exchange_result<T>(
    op: &'static str,
    result: Result<T, HelperError>,
    write_result: std::thread::Result<std::io::Result<()>>,
) -> Result<T, HelperError> {
    match (result, write_result) {
        (Ok(v), Ok(Ok(()))) => Ok(v),
        (Err(e), _) => Err(e),
        (Ok(_), Ok(Err(e))) => Err(HelperError::Stream {
            op,
            source: WireError::Io(e),
            stderr: String::new(),
        }),
        (Ok(_), Err(_)) => Err(HelperError::Protocol {
            op,
            message: "the writer thread panicked".into(),
        }),
    }
}

/// How a helper process ended.
pub(super) struct HelperEnd {
    pub(super) status: std::process::ExitStatus,
    /// Whether it was killed for taking longer than [`HELPER_DEADLINE`].
    pub(super) stuck: bool,
    /// What it wrote to stderr (capped).
    pub(super) stderr: String,
}

/// The operation's outcome: stuck or failed helpers are errors whatever they sent, and a
/// stream error carries the helper's stderr.
pub(super) fn helper_verdict<T>(
    op: &'static str,
    end: HelperEnd,
    result: Result<T, HelperError>,
) -> Result<T, HelperError> {
    if end.stuck {
        return Err(HelperError::Stuck {
            op,
            secs: HELPER_DEADLINE.as_secs(),
        });
    }
    if !end.status.success() {
        return Err(HelperError::Failed {
            op,
            status: end.status.to_string(),
            stderr: end.stderr,
        });
    }
    result.map_err(|e| match e {
        HelperError::Stream { op, source, .. } => HelperError::Stream {
            op,
            source,
            stderr: end.stderr,
        },
        e => e,
    })
}
