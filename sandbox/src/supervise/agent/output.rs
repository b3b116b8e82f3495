//! The agent's output: its pipes read line by line, each line bounded, until the hub hears
//! that nothing the agent started is left.

use super::*;

/// A single line longer than this many bytes is cut: agents print minified JSON and progress
/// bars. The rest of the line is read and dropped, never held: a 300 MB line without a newline
/// costs the hub one read buffer, not 300 MB.
pub const MAX_LINE: usize = 4096;
pub(super) const READ_CHUNK: usize = 8192;

/// Read `pipe` in chunks and hand each line (without its newline, trailing whitespace trimmed,
/// invalid UTF-8 replaced) to `emit`, keeping at most [`MAX_LINE`] bytes of a line: the rest is
/// dropped and the line ends with a marker saying how much. Stops at end of input, on a read
/// error, or when `emit` returns false.
pub async fn read_lines<R, F, Fut>(mut pipe: R, mut emit: F)
where
    R: tokio::io::AsyncRead + Unpin,
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    use tokio::io::AsyncReadExt;
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut line: Vec<u8> = Vec::new();
    let mut dropped: u64 = 0;
    let finish = |line: &mut Vec<u8>, dropped: &mut u64| -> String {
        let mut text = String::from_utf8_lossy(line).trim_end().to_string();
        if *dropped > 0 {
            text.push_str(&format!(
                " … [hunkgate: {dropped} more bytes of this line dropped]"
            ));
        }
        line.clear();
        *dropped = 0;
        text
    };
    loop {
        let n = match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let (part, newline) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..i], Some(i)),
                None => (rest, None),
            };
            let room = MAX_LINE.saturating_sub(line.len()).min(part.len());
            line.extend_from_slice(&part[..room]);
            dropped += (part.len() - room) as u64;
            match newline {
                Some(i) => {
                    rest = &rest[i + 1..];
                    if !emit(finish(&mut line, &mut dropped)).await {
                        return;
                    }
                }
                None => rest = &[],
            }
        }
    }
    if !line.is_empty() || dropped > 0 {
        emit(finish(&mut line, &mut dropped)).await;
    }
}

/// A pipe of the agent's, as it is read.
pub type Pipe = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// Read the agent's stdout and stderr line by line on their own tasks; the lines arrive on
/// the returned channel, which closes when both pipes have — or, once `settled` is cancelled,
/// when each has given what it holds (see [`Settling`]).
pub(super) fn spawn_line_readers(
    stdout: Option<Pipe>,
    stderr: Option<tokio::process::ChildStderr>,
    settled: &CancellationToken,
) -> tokio::sync::mpsc::Receiver<(Stream, String)> {
    let (tx, rx) = tokio::sync::mpsc::channel::<(Stream, String)>(256);
    for (stream, pipe) in [
        (Stream::Stdout, stdout),
        (
            Stream::Stderr,
            stderr.map(|p| Box::new(Settling::new(p, settled.clone())) as Pipe),
        ),
    ] {
        if let Some(pipe) = pipe {
            let tx = tx.clone();
            tokio::spawn(async move {
                read_lines(pipe, |line| {
                    let tx = tx.clone();
                    async move { tx.send((stream, line)).await.is_ok() }
                })
                .await;
            });
        }
    }
    rx
}

/// One of the agent's output pipes, read as it comes until `settled` is cancelled — the hub
/// heard that nothing the agent started is left — and from then on only for what it already
/// holds: the first read that would wait is its end. Other holders of the pipe (a supervisor,
/// sudo) write nothing to it, and need not exit before the output is whole.
pub(super) struct Settling<R> {
    pipe: R,
    settled: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    done: bool,
}

impl<R> Settling<R> {
    pub(super) fn new(pipe: R, settled: CancellationToken) -> Self {
        Self {
            pipe,
            settled: Box::pin(settled.cancelled_owned()),
            done: false,
        }
    }
}

impl<R: tokio::io::AsyncRead + std::os::fd::AsFd + Unpin> tokio::io::AsyncRead for Settling<R> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = self.get_mut();
        if !this.done && std::future::Future::poll(this.settled.as_mut(), cx).is_ready() {
            this.done = true;
        }
        if !this.done {
            return std::pin::Pin::new(&mut this.pipe).poll_read(cx, buf);
        }
        // The pipe itself, not the runtime's idea of whether it is readable (which may lag
        // behind what was written): tokio keeps it non-blocking, so an empty pipe says EAGAIN.
        loop {
            match nix::unistd::read(this.pipe.as_fd(), buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(nix::errno::Errno::EINTR) => continue,
                // Empty: as far as the agent goes, this is the end.
                Err(nix::errno::Errno::EAGAIN) => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(e.into())),
            }
        }
    }
}
