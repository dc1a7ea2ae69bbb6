//! `locksmith latch NAME set N | count-down | wait | count`: a count-down
//! latch from the shell, shared with every other locksmith or Redisson
//! client on the same name. Typical use: N setup jobs count down, and the
//! jobs that depend on them `wait`.

use std::time::Duration;

use crate::exit::{CliError, CONFLICT};

/// What to do with the latch.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum LatchOp {
    /// Arm the latch with a count, only if it is not armed already.
    ///
    /// Exits 0 when set, 1 when the latch already had a count (left
    /// unchanged; the message shows it).
    Set {
        /// The count (at least 1).
        #[arg(value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
    },
    /// Count down by one and print the count left (0: the latch opened and
    /// every waiter woke).
    CountDown,
    /// Wait until the count reaches zero.
    ///
    /// Exits 0 once it is open, 75 when --timeout passed first.
    Wait {
        /// Give up after this long [default: wait forever].
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse)]
        timeout: Option<Duration>,
    },
    /// Print the current count (0 when open).
    Count,
}

/// Runs `op` on latch `name`; answers the exit code.
pub(crate) async fn latch(
    conn: &crate::conn::ConnArgs,
    name: &str,
    op: LatchOp,
) -> Result<u8, CliError> {
    let client = conn.connect().await?;
    let latch = client.count_down_latch(name)?;
    match op {
        LatchOp::Set { count } => {
            if latch.try_set_count(count).await? {
                eprintln!("locksmith: latch {name:?} set to {count}");
                Ok(0)
            } else {
                let now = latch.count().await?;
                eprintln!("locksmith: latch {name:?} is already armed (count {now}); unchanged");
                Ok(1)
            }
        }
        LatchOp::CountDown => {
            println!("{}", latch.count_down().await?);
            Ok(0)
        }
        LatchOp::Wait { timeout } => {
            let open = match timeout {
                Some(t) => latch.wait_for(t).await?,
                None => latch.wait().await.map(|()| true)?,
            };
            if open {
                Ok(0)
            } else {
                eprintln!("locksmith: latch {name:?} still closed after {timeout:?}");
                Ok(CONFLICT)
            }
        }
        LatchOp::Count => {
            println!("{}", latch.count().await?);
            Ok(0)
        }
    }
}
