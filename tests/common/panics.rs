//! Panics of an in-process broker's tasks, which nothing else reports.
//!
//! `Node::start` spawns its tasks (the accept loop, one task per connection, the group timers,
//! the periodic maintenance) on the test's tokio runtime. A panic in one of them ends that task
//! only: tokio catches it, `Node::shutdown` ignores the task's result, and a test whose requests
//! were all answered passes. So every test broker installs [`install`]: a panic hook, chained
//! to the default one (which still prints the message), that records each panic with its thread
//! name. [`since`] lists the panics recorded after a point that a broker owned by the given
//! test thread could have caused: those on that thread (a `current_thread` runtime runs tasks
//! on the test's own thread) and those on runtime threads (`tokio-runtime-worker`, the blocking
//! pool) or unnamed threads. Panics on other test threads (named after their tests) belong to
//! those tests.
//!
//! A panic in a client task the test itself spawned is recorded too; such a test fails anyway.

use std::sync::{Mutex, Once};

#[derive(Clone, Debug)]
pub struct Recorded {
    pub seq: u64,
    pub thread: Option<String>,
    pub message: String,
    pub location: String,
}

impl std::fmt::Display for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "thread '{}' panicked at {}: {}",
            self.thread.as_deref().unwrap_or("<unnamed>"),
            self.location,
            self.message
        )
    }
}

static RECORDED: Mutex<Vec<Recorded>> = Mutex::new(Vec::new());
static NEXT_SEQ: Mutex<u64> = Mutex::new(0);
static INSTALL: Once = Once::new();

/// Installs the recording hook (once per test binary).
pub fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = if let Some(s) = payload.downcast_ref::<&str>() {
                (*s).to_string()
            } else if let Some(s) = payload.downcast_ref::<String>() {
                s.clone()
            } else {
                "(non-string payload)".to_string()
            };
            let location = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_else(|| "(unknown location)".into());
            let thread = std::thread::current().name().map(str::to_string);
            let seq = {
                let mut next = NEXT_SEQ.lock().unwrap_or_else(|e| e.into_inner());
                *next += 1;
                *next
            };
            RECORDED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Recorded {
                    seq,
                    thread,
                    message,
                    location,
                });
            previous(info);
        }));
    });
}

/// The sequence number of the last recorded panic: later panics have larger ones.
pub fn mark() -> u64 {
    *NEXT_SEQ.lock().unwrap_or_else(|e| e.into_inner())
}

/// The name of the current thread (a test's thread is named after the test).
pub fn current_thread_name() -> Option<String> {
    std::thread::current().name().map(str::to_string)
}

/// Panics recorded after `mark` that a broker owned by the thread `owner` could have caused.
pub fn since(mark: u64, owner: Option<&str>) -> Vec<Recorded> {
    RECORDED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|r| r.seq > mark)
        .filter(|r| match r.thread.as_deref() {
            None => true,
            Some(name) => Some(name) == owner || name.starts_with("tokio-"),
        })
        .cloned()
        .collect()
}
