//! `locksmith watch NAME`: a live terminal view of one object (holders,
//! fair queue, lease counting down, grants per second), redrawn until
//! Ctrl-C, which restores the terminal and exits 0.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::admin::{describe, Kind};
use crate::exit::CliError;

/// Arguments of `locksmith watch`.
#[derive(Debug, clap::Args)]
pub(crate) struct WatchArgs {
    /// The object to watch.
    #[arg(value_parser = crate::non_empty)]
    name: String,
    /// What kind of object it is (auto: decided from its keys).
    #[arg(long, value_enum, default_value_t = Kind::Auto)]
    kind: Kind,
    /// How often to redraw.
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse_nonzero, default_value = "250ms")]
    interval: Duration,
}

/// Clears the screen and homes the cursor (ANSI).
const CLEAR: &str = "\x1b[H\x1b[2J";
/// Hides / shows the cursor (ANSI).
const HIDE_CURSOR: &str = "\x1b[?25l";
const SHOW_CURSOR: &str = "\x1b[?25h";

/// Runs the view until SIGINT or SIGTERM.
pub(crate) async fn watch(conn: &crate::conn::ConnArgs, args: WatchArgs) -> Result<u8, CliError> {
    let client = conn.connect().await?;
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| CliError::Other(format!("cannot install signal handlers: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| CliError::Other(format!("cannot install signal handlers: {e}")))?;
    let tty = std::io::stdout().is_terminal();
    let mut out = std::io::stdout();
    if tty {
        let _ = write!(out, "{HIDE_CURSOR}");
    }
    let mut rate = Rate::default();
    let result = loop {
        let frame = match describe(&client, &args.name, args.kind).await {
            Ok((text, json)) => render(&args.name, &text, &json, &mut rate),
            // A passing error (failover, restart) is shown, not fatal.
            Err(e) => format!("locksmith watch {:?}: {e}\n", args.name),
        };
        let written = if tty {
            write!(out, "{CLEAR}{frame}")
        } else {
            writeln!(out, "{frame}")
        };
        if written.and_then(|()| out.flush()).is_err() {
            break Ok(0); // the terminal went away
        }
        tokio::select! {
            _ = sigint.recv() => break Ok(0),
            _ = sigterm.recv() => break Ok(0),
            () = tokio::time::sleep(args.interval) => {}
        }
    };
    if tty {
        let _ = writeln!(out, "{SHOW_CURSOR}");
        let _ = out.flush();
    }
    result
}

/// Grants per second, from the fencing counter's growth between frames.
#[derive(Default)]
struct Rate {
    last: Option<(Instant, u64)>,
    per_second: f64,
}

impl Rate {
    fn update(&mut self, counter: Option<u64>) -> f64 {
        let now = Instant::now();
        if let Some(counter) = counter {
            if let Some((then, before)) = self.last {
                let dt = now.duration_since(then).as_secs_f64();
                if dt > 0.0 && counter >= before {
                    // Smoothed over about a second.
                    let sample = (counter - before) as f64 / dt;
                    let w = (dt / 1.0).min(1.0);
                    self.per_second = self.per_second * (1.0 - w) + sample * w;
                }
            }
            self.last = Some((now, counter));
        }
        self.per_second
    }
}

/// One screen: a header with the lease bar and rate, then `status`'s text.
fn render(name: &str, text: &str, json: &serde_json::Value, rate: &mut Rate) -> String {
    let kind = json["kind"].as_str().unwrap_or("object");
    let counter = json["fencing_counter"].as_u64();
    let per_second = rate.update(counter);
    let mut screen = format!("locksmith watch {name:?} ({kind})   Ctrl-C to quit\n\n");
    match json["remaining_lease_ms"].as_u64() {
        Some(ms) => {
            let secs = ms as f64 / 1000.0;
            let filled = ((secs / 30.0).min(1.0) * 30.0).round() as usize;
            screen.push_str(&format!(
                "lease left  {secs:>7.1} s  [{}{}]\n",
                "#".repeat(filled),
                " ".repeat(30 - filled)
            ));
        }
        None => screen.push_str("lease left        -\n"),
    }
    if counter.is_some() {
        screen.push_str(&format!("grants/s    {per_second:>7.1}\n"));
    }
    screen.push('\n');
    screen.push_str(text);
    screen
}
