//! Every bench command the Makefile names runs to the end: each `make
//! bench*` target's exact arguments, with the phases shortened to a smoke
//! run (a fraction of a second each) and any output files sent to a
//! temporary folder. A bench mode that fails its first phase (as the
//! default mode once did, composing a script without its prelude) fails
//! here, not in a user's hands.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `locksmith` arguments of every Makefile line that runs the bench,
/// with the target's name.
fn makefile_benches() -> Vec<(String, Vec<String>)> {
    let makefile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Makefile"))
        .expect("the workspace Makefile");
    let mut target = String::new();
    let mut found = Vec::new();
    for line in makefile.lines() {
        if let Some((name, _)) = line.split_once(':') {
            if !line.starts_with(['\t', ' ', '#', '.']) && !name.contains(' ') {
                target = name.to_owned();
            }
        }
        if let Some((_, args)) = line.split_once("-p locksmith-lab -- ") {
            let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
            if args.first().map(String::as_str) == Some("bench") {
                found.push((target.clone(), args));
            }
        }
    }
    found
}

/// `args` with the durations shortened and output files moved to `dir`.
fn smoke(args: &[String], dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--duration" | "--tasks" | "--handoffs" => {
                iter.next();
            }
            "--json" | "--svg" => {
                let file = iter.next().expect("a file after --json/--svg");
                let name = std::path::Path::new(file).file_name().unwrap();
                out.push(arg.clone());
                out.push(dir.join(name).display().to_string());
            }
            _ => out.push(arg.clone()),
        }
    }
    out.extend(
        ["--duration", "200ms", "--tasks", "4", "--handoffs", "5"]
            .into_iter()
            .map(str::to_owned),
    );
    out
}

#[test]
fn every_bench_the_makefile_names_runs_to_the_end() {
    let benches = makefile_benches();
    let names: Vec<&str> = benches.iter().map(|(t, _)| t.as_str()).collect();
    for expected in [
        "bench",
        "bench-topologies",
        "bench-family",
        "bench-redlock",
        "bench-multi",
        "bench-peers",
    ] {
        assert!(
            names.contains(&expected),
            "the Makefile's {expected} target runs the bench: {names:?}"
        );
    }
    let dir = std::env::temp_dir().join(format!("documented-benches-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // --ids is documented in docs/cli.md rather than the Makefile.
    let mut runs = benches;
    runs.push((
        "bench --ids".to_owned(),
        vec!["bench".to_owned(), "--ids".to_owned()],
    ));
    for (target, args) in runs {
        let args = smoke(&args, &dir);
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_locksmith-lab"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "make {target} (as `locksmith-lab {}`) failed after {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            args.join(" "),
            started.elapsed()
        );
        if target == "bench-peers" {
            // Redisson itself runs too (scripts/setup installs Java and
            // Maven), with its contended run's sections never overlapping.
            assert!(
                stdout.contains("uncontended (JVM, async)")
                    && stdout.lines().any(|l| l.starts_with("Redisson ")
                        && l.contains("contended (1 key")
                        && l.contains("counter exact"))
                    && stdout.contains("Redisson (JVM)  n="),
                "make {target}: no Redisson rows\nstdout:\n{stdout}\nstderr:\n{stderr}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "make {target} took {:?} as a smoke run",
            started.elapsed()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
