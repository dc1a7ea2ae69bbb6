use locksmith_macros::locked;

#[derive(Debug)]
struct MyError;

#[locked("order:{user_id}", client = client)]
async fn place(client: &locksmith::Client, user_id: u64) -> Result<(), MyError> {
    let _ = (client, user_id);
    Ok(())
}

fn main() {}
