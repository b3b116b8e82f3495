//! The hub end to end, each step next to the git CLI doing the same step (issue #12):
//!
//! ```sh
//! cargo bench -p hunkgate-tests --bench hub
//! ```
//!
//! builds the release `hunkgate` binary (a no-op when it is up to date; `HUNKGATE_BIN=path`
//! uses that binary instead), a synthetic repository of 10,000 files × 200 lines, and drives the
//! hub through its HTTP + WebSocket API only, under `--isolation none` and, when the sandbox
//! user is set up (`hunkgate setup`), `--isolation user`. Prints a markdown table per mode
//! (`docs/performance.md`'s newest run is pasted from it; the README keeps a few of its rows).
//! Figures only: no thresholds. The scale comes from `HUNKGATE_BENCH_*` variables (see
//! `hunkgate_tests::hub_bench::Config::from_env` and `docs/performance.md`); the code itself is
//! in `tests/src/hub_bench.rs`, which `bench_smoke` runs at a tiny scale in the test suite.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{ensure, Context, Result};
use hunkgate_tests::hub_bench::{self, Config};

/// The release binary, built now unless `HUNKGATE_BIN` names one: the figures are always of the
/// code in this checkout, never of a stale build.
fn release_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("HUNKGATE_BIN") {
        return Ok(PathBuf::from(p));
    }
    // The cargo running this benchmark, else the one that built it.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the workspace directory")?
        .to_path_buf();
    eprintln!("[hub bench] cargo build --release -p hunkgate --bin hunkgate");
    let status = Command::new(cargo)
        .current_dir(&workspace)
        .args(["build", "--release", "-p", "hunkgate", "--bin", "hunkgate"])
        .status()
        .context("running cargo build")?;
    ensure!(
        status.success(),
        "cargo build --release -p hunkgate failed ({status})"
    );
    // target/release/deps/hub-<hash> -> target/release/hunkgate
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .context("the target directory")?
        .join("hunkgate");
    ensure!(
        bin.exists(),
        "{} is missing after the build (set HUNKGATE_BIN to the release binary)",
        bin.display()
    );
    Ok(bin)
}

fn main() -> Result<()> {
    let bin = release_binary()?;
    let cfg = Config::from_env(bin)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(hub_bench::run(&cfg))?;
    println!("{}", report.markdown());
    Ok(())
}
