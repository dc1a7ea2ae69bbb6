use locksmith_macros::locked;

#[locked("order:{user_id}", wait = "1s")]
async fn place(user_id: u64) -> Result<(), locksmith::Error> {
    let _ = user_id;
    Ok(())
}

fn main() {}
