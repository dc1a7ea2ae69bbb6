use locksmith_macros::locked;

#[locked("order:{user}", client = client)]
async fn place(client: &locksmith::Client, user_id: u64) -> Result<(), locksmith::Error> {
    let _ = (client, user_id);
    Ok(())
}

fn main() {}
