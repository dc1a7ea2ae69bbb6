//! `locksmith watch` in a pseudo-terminal: the screen shows the holder and
//! a lease counting down, and Ctrl-C exits cleanly (status 0, cursor
//! shown again).

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use locksmith_testkit::RedisServer;
use portable_pty::{native_pty_system, CommandBuilder, PtySize};

/// The "lease left" values of every frame, in order.
fn leases(screen: &str) -> Vec<f64> {
    screen
        .split("lease left")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn the_screen_shows_the_holder_and_a_countdown_and_ctrl_c_quits() {
    let server = RedisServer::start().unwrap();
    // A holder with a fixed 20 s lease, so the lease visibly counts down.
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_locksmith"))
        .args([
            "--redis",
            &server.url(),
            "run",
            "--lock",
            "w:lock",
            "--lease",
            "20s",
            "--no-renew",
            "--",
            "sleep",
            "20",
        ])
        .spawn()
        .unwrap();
    let mut conn = server.connection().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !redis::cmd("EXISTS")
        .arg("w:lock")
        .query::<bool>(&mut conn)
        .unwrap()
    {
        assert!(Instant::now() < deadline, "the holder never took the lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    let owner: Vec<String> = redis::cmd("HKEYS").arg("w:lock").query(&mut conn).unwrap();

    let pty = native_pty_system()
        .openpty(PtySize {
            rows: 40,
            cols: 160,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_locksmith"));
    cmd.args([
        "--redis",
        &server.url(),
        "watch",
        "w:lock",
        "--interval",
        "200ms",
    ]);
    let mut child = pty.slave.spawn_command(cmd).unwrap();
    drop(pty.slave);
    let screen = Arc::new(Mutex::new(Vec::new()));
    let mut reader = pty.master.try_clone_reader().unwrap();
    let sink = screen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    // Watch for a while.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
        if leases(&text).len() >= 6 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
    assert!(text.contains(&owner[0]), "the holder is on screen: {text}");
    assert!(text.contains("\x1b[2J"), "redrawn in place on a terminal");
    let values = leases(&text);
    assert!(values.len() >= 6, "{values:?}");
    assert!(
        values.last().unwrap() < values.first().unwrap(),
        "the lease counts down: {values:?}"
    );
    // Ctrl-C through the terminal.
    let mut writer = pty.master.take_writer().unwrap();
    writer.write_all(b"\x03").unwrap();
    writer.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "watch did not exit on Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    // The reader thread copies what the child wrote last: give it time.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&screen.lock().unwrap()).contains("\x1b[?25h") {
        assert!(Instant::now() < deadline, "the cursor is shown again");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = holder.kill();
    let _ = holder.wait();
}
