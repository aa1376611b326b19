//! What the mock registry tells the aggregate, and when: the fault and sync-control state machine.
//!
//! ```text
//! desired ──(delay line)──▶ visible ──(gate: released, not paused, no error, not stalled)──▶ delivered
//! ```
//!
//! `desired` is what the layers serve now. With a delay fault, each new desired view becomes
//! visible `delay` after it was made; otherwise at once. When the gate is open, the diff between
//! what was delivered and what is visible goes out as one `Changes` batch (then `Synced`, the
//! first time). Status is reported on every transition, except while stalled, when nothing at all
//! goes out. Pure: no I/O and no clock of its own, so it is tested directly.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::diff::diff;
use super::handle::Fault;
use super::layers::View;
use crate::registry::{RegistryEvent, RegistryStatus};

/// The delivery state of one mock registry.
#[derive(Debug)]
pub(crate) struct Delivery {
    /// Active delay fault.
    delay: Option<Duration>,
    /// Active error fault's message.
    error: Option<String>,
    /// Whether a stall fault is active.
    stalled: bool,
    /// Whether PauseSync is in effect.
    paused: bool,
    /// Whether the initial sync may go out (false while `hold_sync` is unreleased).
    released: bool,
    /// Whether `Synced` went out.
    synced: bool,
    /// Desired views waiting for their delay to pass, oldest first.
    pending: VecDeque<(Instant, View)>,
    /// The newest view whose delay has passed.
    visible: View,
    /// What the aggregate has been told.
    delivered: View,
    /// The status the aggregate last heard (it assumes Healthy before hearing anything).
    reported: RegistryStatus,
}

impl Delivery {
    /// A registry about to deliver `initial`; `hold_sync` withholds it until [`Self::release`].
    pub(crate) fn new(initial: View, hold_sync: bool) -> Self {
        Self {
            delay: None,
            error: None,
            stalled: false,
            paused: false,
            released: !hold_sync,
            synced: false,
            pending: VecDeque::new(),
            visible: initial,
            delivered: View::new(),
            reported: RegistryStatus::Healthy,
        }
    }

    /// The layers now serve `desired`.
    pub(crate) fn set_desired(&mut self, desired: View, now: Instant) {
        match self.delay {
            Some(delay) => self
                .pending
                .push_back((crate::duration::deadline(now, delay), desired)),
            None => {
                self.pending.clear();
                self.visible = desired;
            }
        }
    }

    /// When the next delayed view becomes visible.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.pending.iter().map(|(due, _)| *due).min()
    }

    /// Makes every delayed view that is due visible. A later view supersedes earlier ones, so if
    /// a shortened delay makes a later view due first, the earlier ones are dropped with it.
    pub(crate) fn advance(&mut self, now: Instant) {
        if let Some(last_due) = self.pending.iter().rposition(|(due, _)| *due <= now) {
            let mut due: Vec<_> = self.pending.drain(..=last_due).collect();
            if let Some((_, view)) = due.pop() {
                self.visible = view;
            }
        }
    }

    /// Turns a fault on (replacing one of the same kind).
    pub(crate) fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::Delay(d) => self.delay = Some(d),
            Fault::Error { message } => self.error = Some(message),
            Fault::Stall => self.stalled = true,
        }
    }

    /// Turns every fault off; delayed views become visible at once.
    pub(crate) fn clear_faults(&mut self) {
        self.delay = None;
        self.error = None;
        self.stalled = false;
        if let Some((_, view)) = self.pending.drain(..).next_back() {
            self.visible = view;
        }
    }

    /// The active faults.
    pub(crate) fn faults(&self) -> Vec<Fault> {
        let mut out = Vec::new();
        if let Some(d) = self.delay {
            out.push(Fault::Delay(d));
        }
        if let Some(message) = &self.error {
            out.push(Fault::Error {
                message: message.clone(),
            });
        }
        if self.stalled {
            out.push(Fault::Stall);
        }
        out
    }

    /// Lets a held initial sync go out.
    pub(crate) fn release(&mut self) {
        self.released = true;
    }

    /// Stops (`true`) or resumes (`false`) delivering changes.
    pub(crate) fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Whether PauseSync is in effect.
    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    /// Whether the initial sync is still withheld.
    pub(crate) fn sync_held(&self) -> bool {
        !self.released
    }

    /// Whether `Synced` went out.
    pub(crate) fn synced(&self) -> bool {
        self.synced
    }

    /// The status to report: an error fault wins over a file problem.
    pub(crate) fn status(&self, file_problem: Option<&str>) -> RegistryStatus {
        match (&self.error, file_problem) {
            (Some(reason), _) => RegistryStatus::Degraded {
                reason: reason.clone(),
            },
            (None, Some(reason)) => RegistryStatus::Degraded {
                reason: reason.to_string(),
            },
            (None, None) => RegistryStatus::Healthy,
        }
    }

    /// The events to send now, in order, recording them as delivered.
    pub(crate) fn outgoing(&mut self, file_problem: Option<&str>) -> Vec<RegistryEvent> {
        let mut out = Vec::new();
        if self.stalled {
            return out;
        }
        let status = self.status(file_problem);
        if status != self.reported {
            self.reported = status.clone();
            out.push(RegistryEvent::Status(status));
        }
        if !self.released || self.paused || self.error.is_some() {
            return out;
        }
        let changes = diff(&self.delivered, &self.visible);
        if !changes.is_empty() {
            self.delivered = self.visible.clone();
            out.push(RegistryEvent::Changes(changes));
        }
        if !self.synced {
            self.synced = true;
            out.push(RegistryEvent::Synced);
        }
        out
    }
}
