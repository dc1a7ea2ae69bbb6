use locksmith_macros::locked;

#[locked("job:{id}", client = client)]
fn run(client: &locksmith::Client, id: u64) -> Result<(), locksmith::Error> {
    let _ = (client, id);
    Ok(())
}

fn main() {}
