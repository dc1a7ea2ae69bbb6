use locksmith_macros::locked;

const NAME: &str = "order";

#[locked(NAME, client = client)]
async fn place(client: &locksmith::Client) -> Result<(), locksmith::Error> {
    let _ = client;
    Ok(())
}

fn main() {}
