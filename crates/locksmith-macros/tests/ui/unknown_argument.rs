use locksmith_macros::locked;

#[locked("order:{user_id}", client = client, timeout = "1s")]
async fn place(client: &locksmith::Client, user_id: u64) -> Result<(), locksmith::Error> {
    let _ = (client, user_id);
    Ok(())
}

fn main() {}
