//! Deadline waits: polling a check, and watching an object until a condition holds.

use std::fmt::Debug;
use std::time::Duration;

use anyhow::{Result, bail};
use kube::Api;
use kube::runtime::wait::await_condition;
use serde::de::DeserializeOwned;

use crate::process::Supervised;

/// Polls `check` every `every` until it returns true. Fails after `timeout`, or as soon as
/// `process` (the program being waited for) has exited; the message says `what` did not
/// happen and carries the tail of that program's log.
///
/// # Errors
/// On time-out or when the process exits first.
pub async fn poll_until<F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut process: Option<&mut Supervised>,
    mut check: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return Ok(());
        }
        let exited = process.as_mut().is_some_and(|p| p.exited().is_some());
        if exited || tokio::time::Instant::now() > deadline {
            let log = process.map(|p| p.log_tail(30)).unwrap_or_default();
            let why = if exited {
                "the program exited".to_owned()
            } else {
                format!("not within {timeout:?}")
            };
            bail!("{what} ({why}):\n{log}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Watches object `name` of `api` until `cond` holds for it, at most `timeout`; returns the
/// object as it was then. `Ok(None)` means the time ran out (the caller says what it waited
/// for and shows the state it found).
///
/// # Errors
/// When the watch itself fails.
pub async fn await_object<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    cond: impl Fn(&K) -> bool + Send + 'static,
) -> Result<Option<K>>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let holds = move |k: Option<&K>| k.is_some_and(&cond);
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, holds)).await {
        Ok(found) => Ok(found?),
        Err(_) => Ok(None),
    }
}
