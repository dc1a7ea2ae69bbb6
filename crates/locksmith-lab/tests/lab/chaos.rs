//! The chaos runner through the built binary: each kind deliberately
//! broken (`--broken`) is caught, and so is a release without the owner
//! check. The runs that must pass (every single-server fault with every
//! kind on its own name, Redlock under server faults, the semaphores'
//! permits accounted for) are in `chaos_alone.rs`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The runs share the machine's cores with their servers and workers. A
/// run that must pass has it to itself (`make test` runs
/// `chaos_alone.rs` after everything else, one test at a time), so
/// recovery times and lost signals are not skewed by other work; runs of
/// deliberately broken kinds (which must fail, and whose timing proves
/// nothing) go together, beside the other tests, at a lower priority.
static RUNS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Whether a run must pass (and so runs alone) or is of a broken kind.
#[derive(Clone, Copy)]
pub(super) enum Run {
    MustPass,
    Broken,
}

pub(super) fn chaos(
    run: Run,
    args: &[&str],
    json: &std::path::Path,
) -> (Option<i32>, String, serde_json::Value) {
    let _turn: Box<dyn std::any::Any> = match run {
        Run::MustPass => Box::new(RUNS.write().unwrap_or_else(|e| e.into_inner())),
        Run::Broken => Box::new(RUNS.read().unwrap_or_else(|e| e.into_inner())),
    };
    let started = Instant::now();
    let exe = env!("CARGO_BIN_EXE_locksmith-lab");
    let mut cmd = match run {
        Run::MustPass => Command::new(exe),
        // Below the other tests' priority: several go at once, beside
        // other tests' timers.
        Run::Broken => {
            let mut nice = Command::new("nice");
            nice.args(["-n", "10", exe]);
            nice
        }
    };
    let out = cmd
        .arg("chaos")
        .args(args)
        .arg("--json")
        .arg(json)
        .stdin(Stdio::null())
        .output()
        .expect("run locksmith-lab chaos");
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "the run is bounded"
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = std::fs::read_to_string(json).unwrap_or_else(|e| {
        panic!(
            "no JSON written ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        out.status.code(),
        stdout,
        serde_json::from_str(&text).unwrap(),
    )
}

/// `kind` deliberately broken (`--broken`: locks given back at the grant,
/// the fair lock's name taken without its queue, read-write writers
/// holding reads, semaphores giving permits back twice) is caught within a
/// 12 s run (the bound is 30 s): the run fails with `rule`.
fn broken_kind_is_caught(kind: &str, rule: &str) {
    broken_kind_is_caught_on(kind, rule, &["--faults", "latency"]);
}

/// As [`broken_kind_is_caught`], with `extra` options (the topology, or
/// the faults: one fault is injected).
fn broken_kind_is_caught_on(kind: &str, rule: &str, extra: &[&str]) {
    let dir = std::env::temp_dir().join(format!("chaos-broken-{kind}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("chaos.json");
    let (code, stdout, figures) = chaos(
        Run::Broken,
        &[
            &[
                "--duration",
                "12s",
                "--max-faults",
                "1",
                "--kind",
                kind,
                "--broken",
                // Contention: waiters that wait long enough to be overtaken.
                "--names",
                "2",
                "--workers",
                "6",
            ][..],
            extra,
        ]
        .concat(),
        &json,
    );
    assert_eq!(
        code,
        Some(1),
        "{kind}: violations make the run fail: {stdout}"
    );
    let violations = figures["report"]["violations"].as_array().unwrap();
    assert!(
        violations.iter().any(|v| v["rule"] == rule),
        "{kind}: the broken primitive breaks {rule}: {stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_broken_lock_kind_is_caught() {
    broken_kind_is_caught("lock", "overlap");
}

#[test]
fn a_broken_fair_lock_is_caught() {
    broken_kind_is_caught("fair", "fifo");
}

#[test]
fn a_broken_read_write_lock_is_caught() {
    broken_kind_is_caught("read-write", "overlap");
}

#[test]
fn a_broken_semaphore_is_caught() {
    broken_kind_is_caught("semaphore", "overlap");
}

#[test]
fn a_broken_permit_semaphore_is_caught() {
    broken_kind_is_caught("permit", "overlap");
}

#[test]
fn a_broken_multi_lock_is_caught() {
    broken_kind_is_caught("multi", "overlap");
}

#[test]
fn a_broken_latch_is_caught() {
    broken_kind_is_caught("latch", "latch-early");
}

/// Redlock on five servers, broken: caught (the runs that must pass,
/// with server faults, are in `chaos_alone.rs`).
#[test]
fn a_broken_redlock_is_caught() {
    broken_kind_is_caught_on("redlock", "overlap", &["--topology", "redlock"]);
}

#[test]
fn a_broken_lock_is_caught() {
    let dir = std::env::temp_dir().join(format!("chaos-broken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("chaos.json");
    let (code, stdout, figures) = chaos(
        Run::Broken,
        &["--duration", "25s", "--faults", "pause", "--broken-release"],
        &json,
    );
    assert_eq!(code, Some(1), "violations make the run fail: {stdout}");
    let violations = figures["report"]["violations"].as_array().unwrap();
    assert!(
        violations.iter().any(|v| v["rule"] == "overlap"),
        "the broken release lets two holders in: {stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
