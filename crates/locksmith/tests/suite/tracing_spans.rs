//! What the library tells `tracing`: a span per acquire and per release
//! with kind, name, outcome and token; a warning when a fixed-lease hold
//! passes 80% of its lease, and when a lease is found lost. Read through a
//! recording layer installed as the global subscriber (so the test
//! runs in a process of its own: see `common::in_own_process`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Default)]
struct Fields(HashMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// A span's name and fields, by span id.
type Spans = HashMap<u64, (String, HashMap<String, String>)>;

/// Spans (name, fields) and warnings (fields).
#[derive(Default, Clone)]
struct Seen {
    spans: Arc<Mutex<Spans>>,
    warnings: Arc<Mutex<Vec<HashMap<String, String>>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Seen {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        self.spans.lock().unwrap().insert(
            id.into_u64(),
            (attrs.metadata().name().to_owned(), fields.0),
        );
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        values.record(&mut fields);
        if let Some((_, f)) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            f.extend(fields.0);
        }
    }
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == Level::WARN {
            let mut fields = Fields::default();
            event.record(&mut fields);
            self.warnings.lock().unwrap().push(fields.0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_warnings_say_what_happened() {
    // The global subscriber would see the other tests of this binary.
    if !crate::common::in_own_process(module_path!(), "spans_and_warnings_say_what_happened") {
        return;
    }
    let seen = Seen::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(seen.clone()))
        .expect("the only subscriber of this process");

    let server = RedisServer::start().unwrap();
    let client = Client::open(&server.url()).await.unwrap();
    let guard = client.lock("t:lock").unwrap().lock().await.unwrap();
    let token = guard.fencing_token();
    let busy = client
        .lock("t:lock")
        .unwrap()
        .try_lock_for(Duration::from_millis(30))
        .await
        .unwrap();
    assert!(busy.is_none());
    guard.release().await.unwrap();
    // A fixed lease held past 80% of it, then lost. The warning comes from
    // the watchdog's wake-up between 80% of the lease and its end: 3 s
    // leave that wake-up 600 ms, also on a loaded machine.
    let short = client
        .lock("t:short")
        .unwrap()
        .with_lease(Duration::from_secs(3))
        .unwrap()
        .lock()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(short.release().await.is_err());

    let spans = seen.spans.lock().unwrap().clone();
    let find = |name: &str, outcome: &str| {
        spans
            .values()
            .filter(|(n, f)| n == name && f.get("outcome").map(String::as_str) == Some(outcome))
            .map(|(_, f)| f.clone())
            .collect::<Vec<_>>()
    };
    let granted = find("locksmith.acquire", "granted");
    assert!(
        granted
            .iter()
            .any(|f| f.get("name").map(String::as_str) == Some("t:lock")
                && f.get("kind").map(String::as_str) == Some("lock")
                && f.get("token") == Some(&token.to_string())
                && f.contains_key("wait_ms")),
        "{spans:?}"
    );
    assert_eq!(find("locksmith.acquire", "timeout").len(), 1, "{spans:?}");
    let released = find("locksmith.release", "ok");
    assert!(
        released
            .iter()
            .any(|f| f.get("token") == Some(&token.to_string())),
        "{spans:?}"
    );
    assert_eq!(find("locksmith.release", "not_held").len(), 1, "{spans:?}");
    let warnings = seen.warnings.lock().unwrap().clone();
    let said = |needle: &str| {
        warnings
            .iter()
            .any(|w| w.get("message").is_some_and(|m| m.contains(needle)))
    };
    assert!(said("passed 80% of its lease"), "{warnings:?}");
    assert!(said("lease lost"), "{warnings:?}");
}
