//! `locksmith id PREFIX [--count N] [--block K] [--json]`: ids from the
//! library's generator, for scripts that need the same unique,
//! time-ordered ids as the services.

use locksmith::IdGenerator;

use crate::exit::CliError;

/// Arguments of `locksmith id`.
#[derive(Debug, clap::Args)]
pub(crate) struct IdArgs {
    /// The generator's prefix: ids of one prefix are unique across every
    /// client (the day's counter is `PREFIX:<day>`).
    #[arg(value_parser = crate::non_empty)]
    prefix: String,
    /// How many ids to print.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    count: u32,
    /// Reserve this many ids per round trip (block mode; never more than
    /// --count).
    #[arg(long, value_name = "K", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    block: u32,
    /// Print a JSON array of objects (id, seconds since the epoch, sequence)
    /// instead of one id per line.
    #[arg(long)]
    json: bool,
}

/// Prints `args.count` ids.
pub(crate) async fn ids(conn: &crate::conn::ConnArgs, args: IdArgs) -> Result<u8, CliError> {
    let client = conn.connect().await?;
    // A block larger than the ids wanted would only waste the day's
    // sequence numbers.
    let generator = client
        .id_generator(args.prefix)?
        .with_block(args.block.min(args.count))?;
    let mut ids = Vec::with_capacity(args.count as usize);
    for _ in 0..args.count {
        ids.push(generator.next_id().await?);
    }
    if args.json {
        let items: Vec<_> = ids
            .iter()
            .map(|&id| {
                let (secs, seq) = IdGenerator::split(id);
                serde_json::json!({
                    "id": id.to_string(),
                    "seconds": secs,
                    "sequence": seq,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(items));
    } else {
        let mut out = String::new();
        for id in ids {
            out.push_str(&id.to_string());
            out.push('\n');
        }
        print!("{out}");
    }
    Ok(0)
}
