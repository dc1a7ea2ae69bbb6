//! Undo on drop: what a call must do if its caller goes away before it
//! finished, armed for as long as that may happen.
//!
//! A call that changes the server (an acquire that may grant, a release
//! that may have freed) arms an [`Armed`] with the state its undo needs
//! and the undo itself. Kept ([`Armed::keep`]) or disarmed, nothing runs;
//! dropped armed (the caller's future was dropped mid-call, or an error
//! left the outcome unknown), the undo runs in the client's tracked
//! background work. A caller whose request goes through a batcher tracks
//! it ([`Armed::after`]): the undo then runs only once that request has
//! settled (answered, or withdrawn unsent), so it can never reach Redis
//! ahead of what it undoes. A request sent straight on the connection
//! is untracked: its undo follows it on the same
//! connection, which keeps the order, except where a layer below resends
//! unseen (redis-rs's retries on a cluster after a dropped connection).
//!
//! The undo is keyed on the caller's state, not on the reply: the kinds
//! whose undo needs the reply itself (giving back only what a request
//! actually took) use `Batcher::call_undoable` instead.

use std::future::Future;
use std::pin::Pin;

use crate::engine::batch::Tracked;
use crate::engine::task::Tasks;

/// What an undo runs: made when the undo is due, run once the request it
/// follows has settled.
pub(crate) type UndoFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Names the type of an undo closure where it is written (its state's
/// type and its future's), for [`Armed::new`]. The closure is called with
/// the armed state when the undo is due (the state is the undo's from the
/// call on, so an undo whose future is dropped unrun can put the state
/// right in its own drop). It lives inline in the caller's future: arming
/// an undo allocates nothing.
pub(crate) fn closure<S, F>(undo: F) -> F
where
    F: FnOnce(S) -> UndoFuture + Send + 'static,
{
    undo
}

/// A state with an undo armed (see the module docs).
pub(crate) struct Armed<S, F>
where
    S: Send + 'static,
    F: FnOnce(S) -> UndoFuture + Send + 'static,
{
    /// The state; `None` once kept.
    state: Option<S>,
    /// What undoes; `None` when nothing needs undoing.
    undo: Option<F>,
    /// Settles once the latest request can no longer reach Redis.
    after: Option<Tracked>,
    /// Where the undo runs (the client's background work).
    tasks: Tasks,
    /// What the undo does, and what is left if it cannot run (no runtime).
    what: (&'static str, &'static str),
}

impl<S, F> Armed<S, F>
where
    S: Send + 'static,
    F: FnOnce(S) -> UndoFuture + Send + 'static,
{
    /// `state` with `undo` armed; `what` says in a warning what the undo
    /// is and what is left if it cannot run.
    pub(crate) fn new(
        tasks: &Tasks,
        what: (&'static str, &'static str),
        state: S,
        undo: F,
    ) -> Self {
        Armed {
            state: Some(state),
            undo: Some(undo),
            after: None,
            tasks: tasks.clone(),
            what,
        }
    }

    /// The undo waits for `request` to settle (replacing what it waited
    /// for: each resend supersedes the send before it).
    pub(crate) fn after(&mut self, request: Tracked) {
        self.after = Some(request);
    }

    /// Nothing needs undoing after all (the state stays, and is dropped
    /// as it is).
    pub(crate) fn disarm(&mut self) {
        self.undo = None;
    }

    /// The caller takes the state back: disarms the undo.
    pub(crate) fn keep(mut self) -> S {
        self.undo = None;
        self.state
            .take()
            .expect("an armed state is only taken by keep(), which consumes it")
    }

    /// The state, still armed.
    pub(crate) fn state(&mut self) -> &mut S {
        self.state
            .as_mut()
            .expect("an armed state is only taken by keep(), which consumes it")
    }
}

impl<S, F> Drop for Armed<S, F>
where
    S: Send + 'static,
    F: FnOnce(S) -> UndoFuture + Send + 'static,
{
    fn drop(&mut self) {
        let (Some(state), Some(undo)) = (self.state.take(), self.undo.take()) else {
            return;
        };
        let after = self.after.take();
        let undo = undo(state);
        let (what, left) = self.what;
        self.tasks.detach(what, left, async move {
            if let Some(after) = after {
                after.settled().await;
            }
            undo.await;
        });
    }
}
