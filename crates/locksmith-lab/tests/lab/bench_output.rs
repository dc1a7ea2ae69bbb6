//! `locksmith-lab bench ... --json FILE --svg FILE`: the numbers as JSON and a
//! bar chart, from a short run on the bench's own server.

use std::process::Command;

#[test]
fn a_run_writes_its_numbers_as_json_and_a_chart() {
    let dir = std::env::temp_dir().join(format!("bench-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("ids.json"), dir.join("ids.svg"));
    let out = Command::new(env!("CARGO_BIN_EXE_locksmith-lab"))
        .args([
            "bench",
            "--ids",
            "--duration",
            "300ms",
            "--tasks",
            "4",
            "--json",
        ])
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let numbers: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let phases = numbers["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3, "{numbers}");
    for p in phases {
        assert!(p["ops_per_s"].as_f64().unwrap() > 0.0, "{p}");
    }
    assert_eq!(phases[2]["phase"], "IdGenerator, block of 1000");
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg"), "an SVG");
    assert!(
        chart.contains("IdGenerator, block of 1000"),
        "the phases label the bars"
    );
    assert!(chart.contains("operations per second"), "the axis is named");
    let _ = std::fs::remove_dir_all(&dir);
}
