//! The chaos runs that must pass, each with the machine to itself: they
//! check recovery windows and lost signals against the clock, so they do
//! not run beside the other tests. `make test` runs this module after
//! every test binary has finished (`scripts/run-tests --alone`), one test
//! at a time; the runs of broken kinds (`chaos.rs`) go beside the rest.

use super::chaos::{chaos, Run};

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

/// Redlock on five servers under pauses and kills of a minority and of a
/// majority of them, and of its workers: no violations (exclusion while a
/// majority is up, nothing granted and `NoQuorum` answered at once while
/// it is not). A broken Redlock being caught is `chaos::a_broken_redlock_is_caught`.
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
