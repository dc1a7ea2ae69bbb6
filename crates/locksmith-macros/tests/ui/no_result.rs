use locksmith_macros::locked;

#[locked("order:{user_id}", client = client)]
async fn place(client: &locksmith::Client, user_id: u64) {
    let _ = (client, user_id);
}

fn main() {}
