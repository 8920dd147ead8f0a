//! Wake-ups: "this outbox has work". Sent after a writer commits and, delayed by the backoff,
//! after a failed publish. In AWS they are SQS messages for the `outbox` function; locally they
//! are delivered in process. A lost wake-up only delays rows until the next scheduled sweep.

use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{OnceCell, mpsc};

use super::OutboxRef;

/// Sends wake-ups. Failures are logged, never returned: the sweep covers lost ones.
pub trait Wakeups: Send + Sync {
    fn wake(&self, target: OutboxRef) -> BoxFuture<'_, ()> {
        self.wake_later(target, Duration::ZERO)
    }
    fn wake_later(&self, target: OutboxRef, delay: Duration) -> BoxFuture<'_, ()>;
}

/// One in-process wake-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeRequest {
    pub target: OutboxRef,
    pub delay: Duration,
}

/// In-process wake-ups for the local runner: delivered to whoever subscribed (the runner's
/// drainer); without a subscriber they are dropped, as a sweep would find the rows anyway.
#[derive(Default)]
pub struct LocalWakeups {
    sender: Mutex<Option<mpsc::UnboundedSender<WakeRequest>>>,
}

impl LocalWakeups {
    /// Starts delivering wake-ups to the returned receiver (replacing any earlier subscriber).
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<WakeRequest> {
        let (sender, receiver) = mpsc::unbounded_channel();
        if let Ok(mut slot) = self.sender.lock() {
            *slot = Some(sender);
        }
        receiver
    }
}

impl Wakeups for LocalWakeups {
    fn wake_later(&self, target: OutboxRef, delay: Duration) -> BoxFuture<'_, ()> {
        if let Ok(slot) = self.sender.lock()
            && let Some(sender) = slot.as_ref()
        {
            sender.send(WakeRequest { target, delay }).ok();
        }
        async {}.boxed()
    }
}

/// The wake-ups of a deployed function that holds no wake-up queue (it was never meant to send
/// any): each attempt is an error in the log, never a silent in-process delivery that nobody
/// drains.
pub struct NoWakeupQueue;

impl Wakeups for NoWakeupQueue {
    fn wake_later(&self, target: OutboxRef, _delay: Duration) -> BoxFuture<'_, ()> {
        tracing::error!(
            table = %target.table,
            "outbox wake-up not sent: this function holds no K2B_WAKEUP_QUEUE_URL"
        );
        async {}.boxed()
    }
}

/// Wake-ups as SQS messages (`DelaySeconds` = the delay, at most 900 s).
pub struct SqsWakeups {
    queue_url: String,
    client: OnceCell<aws_sdk_sqs::Client>,
}

impl SqsWakeups {
    pub fn new(queue_url: impl Into<String>) -> SqsWakeups {
        SqsWakeups {
            queue_url: queue_url.into(),
            client: OnceCell::new(),
        }
    }

    /// With an explicit client (tests point it at a local SQS API).
    pub fn with_client(queue_url: impl Into<String>, client: aws_sdk_sqs::Client) -> SqsWakeups {
        SqsWakeups {
            queue_url: queue_url.into(),
            client: OnceCell::new_with(Some(client)),
        }
    }

    async fn client(&self) -> &aws_sdk_sqs::Client {
        self.client
            .get_or_init(super::batch::sqs_client_from_env)
            .await
    }
}

impl Wakeups for SqsWakeups {
    fn wake_later(&self, target: OutboxRef, delay: Duration) -> BoxFuture<'_, ()> {
        async move {
            let seconds = delay.as_secs().min(900) as i32;
            let result = self
                .client()
                .await
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(target.to_message())
                .delay_seconds(seconds)
                .send()
                .await;
            if let Err(error) = result {
                tracing::warn!(
                    table = %target.table,
                    error = %aws_sdk_sqs::error::DisplayErrorContext(&error),
                    "outbox wake-up not sent; the scheduled sweep will pick the rows up"
                );
            }
        }
        .boxed()
    }
}
