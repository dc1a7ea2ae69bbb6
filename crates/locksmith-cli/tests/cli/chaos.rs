//! The chaos runner through the built binary: a short run under every
//! single-server fault with every kind on its own name (lock, fair lock,
//! read-write lock, counting and permit semaphores, MultiLock, latch)
//! passes with zero violations; a run without restarts accounts for the
//! semaphores' permits; each kind deliberately broken (`--broken`) is
//! caught, and so is a release without the owner check.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The runs share the machine's cores with their servers and workers, and
/// with the other test binaries (`make test` runs them all at once). A
/// run that must pass has it to itself among the chaos runs and a higher
/// priority than the rest, so recovery times and lost signals are not
/// skewed by other work; runs of deliberately broken kinds (which must
/// fail, and whose timing proves nothing) go together, at a lower one.
static RUNS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Whether a run must pass (and so runs alone) or is of a broken kind.
#[derive(Clone, Copy)]
enum Run {
    MustPass,
    Broken,
}

fn chaos(
    run: Run,
    args: &[&str],
    json: &std::path::Path,
) -> (Option<i32>, String, serde_json::Value) {
    let _turn: Box<dyn std::any::Any> = match run {
        Run::MustPass => Box::new(RUNS.write().unwrap_or_else(|e| e.into_inner())),
        Run::Broken => Box::new(RUNS.read().unwrap_or_else(|e| e.into_inner())),
    };
    let started = Instant::now();
    let exe = env!("CARGO_BIN_EXE_locksmith");
    let mut cmd = match run {
        // Above the other tests' priority where the user may raise it
        // (root; elsewhere `nice` says it cannot and runs it as it is):
        // the run checks recovery windows and lost signals against the
        // clock, and the other test binaries run beside it.
        Run::MustPass => {
            let mut nice = Command::new("nice");
            nice.args(["-n", "-5", exe]);
            nice
        }
        // Below everything else's priority: several go at once, beside
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
        .expect("run locksmith chaos");
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

#[test]
fn a_short_run_under_every_fault_has_no_violations() {
    let dir = std::env::temp_dir().join(format!("chaos-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("chaos.json");
    let (code, stdout, figures) = chaos(
        Run::MustPass,
        &["--duration", "60s", "--kind", "mixed", "--names", "7"],
        &json,
    );
    assert_eq!(figures["kind"], "mixed", "{figures}");
    let report = &figures["report"];
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(
        report["violations"].as_array().unwrap().len(),
        0,
        "{stdout}"
    );
    // Every single-server fault happened, and work got done.
    for kind in ["kill", "pause", "restart", "black-hole", "latency", "cut"] {
        assert!(
            report["faults"][kind].as_u64().unwrap_or(0) >= 1,
            "{kind} never injected: {stdout}"
        );
    }
    assert!(report["grants"].as_u64().unwrap() > 100, "{stdout}");
    assert!(
        report["writes_accepted"].as_u64().unwrap() > 100,
        "{stdout}"
    );
    // A holder paused past its lease learned of the loss.
    if report["holder_pauses"].as_u64().unwrap() >= 1 {
        assert!(report["losses_noticed"].as_u64().unwrap() >= 1, "{stdout}");
    }
    // Every kind was granted (the MultiLock's members count as locks; a
    // latch's grants are waits that saw it open).
    for kind in [
        "lock",
        "fair-lock",
        "read-write",
        "semaphore",
        "permit-semaphore",
        "latch",
    ] {
        assert!(
            report["per_kind"][kind]["grants"].as_u64().unwrap_or(0) > 10,
            "{kind}: {stdout}"
        );
    }
    // Both semaphores' permits were read back after the run.
    assert_eq!(report["permits"].as_array().unwrap().len(), 2, "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
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

/// Redlock on five servers under pauses and kills of a minority and of a
/// majority of them, and of its workers: no violations (exclusion while a
/// majority is up, nothing granted and `NoQuorum` answered at once while
/// it is not), and a broken Redlock is caught.
#[test]
fn redlock_under_server_faults_has_no_violations() {
    let dir = std::env::temp_dir().join(format!("chaos-redlock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("chaos.json");
    let (code, stdout, figures) = chaos(
        Run::MustPass,
        &[
            "--duration",
            "40s",
            "--topology",
            "redlock",
            "--kind",
            "redlock",
        ],
        &json,
    );
    assert_eq!(code, Some(0), "{stdout}");
    let report = &figures["report"];
    for kind in [
        "node-pause-minority",
        "node-pause-majority",
        "node-kill-minority",
        "node-kill-majority",
    ] {
        assert!(
            report["faults"][kind].as_u64().unwrap_or(0) >= 1,
            "{kind} never injected: {stdout}"
        );
    }
    assert!(report["grants"].as_u64().unwrap() > 100, "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
    broken_kind_is_caught_on("redlock", "overlap", &["--topology", "redlock"]);
}

/// Without restarts and failovers the semaphores' permits are accounted
/// for after the run: all back, or within what unanswered calls leave
/// open; the killed holders' permits given back by the nemesis.
#[test]
fn semaphore_permits_are_accounted_for_after_a_run() {
    let dir = std::env::temp_dir().join(format!("chaos-permits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("chaos.json");
    let (code, stdout, figures) = chaos(
        Run::MustPass,
        &[
            "--duration",
            "25s",
            "--kind",
            "mixed",
            "--names",
            "7",
            "--faults",
            "kill,cut,pause,black-hole,latency",
        ],
        &json,
    );
    assert_eq!(code, Some(0), "{stdout}");
    let permits = figures["report"]["permits"].as_array().unwrap();
    assert_eq!(permits.len(), 2, "{stdout}");
    for line in permits {
        assert!(line["expected"].is_array(), "checked: {stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
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
