//! Micro-batching of live updates: per-row publishes that meet within one scheduler turn share one
//! SQS `SendMessageBatch` call.
//!
//! The outbox engine polls one future per key of a claimed batch on one task, and each publishes
//! its key's rows one at a time. A publish here queues its message, yields once (so the other
//! keys' futures queue theirs), then takes up to [`MAX_BATCH_ENTRIES`] queued messages, at most
//! one per message group and within [`MAX_BATCH_BYTES`], sends them in one call and answers each
//! message's publisher. It keeps taking and sending while messages are queued and its own answer
//! has not come, then waits for its answer. There is no timer and no background task: a message
//! is sent by whichever publish finds it queued first.
//!
//! Order per group holds without any help from this module: the engine publishes a key's next
//! row only after the previous publish succeeded, so one group never has two messages queued at
//! once. A message SQS refuses inside an otherwise successful batch fails alone; the engine then
//! retries that row later and releases the key's later rows, which were never sent, so they
//! cannot overtake it. Taking one message per group per call is a second line of defence: even
//! two queued messages of one group (two passes of one outbox) go out in two calls, in order.
//!
//! A publish whose future is dropped (the engine's publish timeout) may leave its message queued
//! (it is then dropped unsent) or in a call in flight (the call is abandoned and every message of
//! it fails with "publish abandoned"). Those rows are retried, and their deduplication id (the
//! row id) drops the copy if the first send reached SQS after all.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use tokio::sync::{OnceCell, oneshot};
use uuid::Uuid;

use super::engine::PublishError;
use crate::telemetry::metrics;

/// SQS's limit on the entries of one `SendMessageBatch` call.
pub const MAX_BATCH_ENTRIES: usize = 10;
/// SQS's limit on the summed bodies of one `SendMessageBatch` call, in bytes (256 KiB). A live
/// body may be up to 32 KiB (`events.enqueue` replaces larger ones), so ten of them can pass it.
pub const MAX_BATCH_BYTES: usize = 262_144;
/// The answer of a publish whose batch call was dropped before it ended.
pub const ABANDONED: &str = "publish abandoned";

/// Creates an SQS client from the environment (region, credentials, `AWS_ENDPOINT_URL_SQS`).
pub async fn sqs_client_from_env() -> aws_sdk_sqs::Client {
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    aws_sdk_sqs::Client::new(&config)
}

/// One message to send: the body, its FIFO group and deduplication ids, and the outbox row id
/// (for logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchMessage {
    pub row_id: Uuid,
    pub body: String,
    pub group_id: String,
    pub deduplication_id: String,
}

/// A queued message and the channel its publisher waits on.
struct Queued {
    message: BatchMessage,
    reply: oneshot::Sender<Result<(), PublishError>>,
}

/// Which of the queued messages (group id, body bytes, oldest first) one call sends: the indices,
/// ascending. At most [`MAX_BATCH_ENTRIES`], one per group, bodies summing to at most
/// [`MAX_BATCH_BYTES`] — except a first message that is larger on its own, which goes alone (and
/// fails on its own). A message of a group that an earlier message passed over stays behind too,
/// so a group's messages are never sent out of order.
pub fn select<'a>(queued: impl IntoIterator<Item = (&'a str, usize)>) -> Vec<usize> {
    let mut chosen = Vec::new();
    let mut seen_groups: Vec<&str> = Vec::new();
    let mut bytes = 0usize;
    for (index, (group, size)) in queued.into_iter().enumerate() {
        if chosen.len() == MAX_BATCH_ENTRIES {
            break;
        }
        if seen_groups.contains(&group) {
            continue;
        }
        seen_groups.push(group);
        if chosen.is_empty() && size > MAX_BATCH_BYTES {
            chosen.push(index);
            break;
        }
        if bytes + size > MAX_BATCH_BYTES {
            continue;
        }
        bytes += size;
        chosen.push(index);
    }
    chosen
}

/// Sends messages to one SQS FIFO queue in batches (see the module documentation). Keep one per
/// queue and process: publishes meet in its queue.
pub struct SqsBatcher {
    queue_url: String,
    client: OnceCell<aws_sdk_sqs::Client>,
    queued: Mutex<VecDeque<Queued>>,
}

impl SqsBatcher {
    /// A batcher for `queue_url`; without a client, one is made from the environment on first use.
    pub fn new(queue_url: impl Into<String>, client: Option<aws_sdk_sqs::Client>) -> SqsBatcher {
        SqsBatcher {
            queue_url: queue_url.into(),
            client: OnceCell::new_with(client),
            queued: Mutex::new(VecDeque::new()),
        }
    }

    /// Sends `message`, most likely in one call with the messages other publishes queued meanwhile.
    /// Resolves once SQS accepted it; an error means it was not (or may not have been) sent.
    pub async fn send(&self, message: BatchMessage) -> Result<(), PublishError> {
        let (reply, mut answer) = oneshot::channel();
        self.lock().push_back(Queued { message, reply });
        // The other keys' publishes polled by the same task queue their messages meanwhile.
        tokio::task::yield_now().await;
        loop {
            match answer.try_recv() {
                Ok(outcome) => return outcome,
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(PublishError(ABANDONED.into()));
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let batch = self.take();
            if batch.is_empty() {
                break;
            }
            self.send_batch(batch).await;
        }
        // Another publish took this message into its call: its answer comes from there.
        answer
            .await
            .unwrap_or_else(|_| Err(PublishError(ABANDONED.into())))
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Queued>> {
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Removes the messages of the next call from the queue (the rest keep their order), after
    /// dropping the messages whose publisher gave up (the engine retries those rows).
    fn take(&self) -> Vec<Queued> {
        let mut queued = self.lock();
        queued.retain(|q| !q.reply.is_closed());
        let chosen = select(
            queued
                .iter()
                .map(|q| (q.message.group_id.as_str(), q.message.body.len())),
        );
        if chosen.is_empty() {
            return Vec::new();
        }
        let mut taken = Vec::with_capacity(chosen.len());
        let mut kept = VecDeque::with_capacity(queued.len() - chosen.len());
        let mut next = chosen.iter().peekable();
        for (index, entry) in queued.drain(..).enumerate() {
            if next.peek() == Some(&&index) {
                next.next();
                taken.push(entry);
            } else {
                kept.push_back(entry);
            }
        }
        *queued = kept;
        taken
    }

    /// One `SendMessageBatch` call (entry ids "0".."9"); answers every message of it.
    async fn send_batch(&self, batch: Vec<Queued>) {
        let entries = batch.len();
        let mut replies = Vec::with_capacity(entries);
        let mut request = Vec::with_capacity(entries);
        for (index, Queued { message, reply }) in batch.into_iter().enumerate() {
            let entry = SendMessageBatchRequestEntry::builder()
                .id(index.to_string())
                .message_body(message.body)
                .message_group_id(message.group_id)
                .message_deduplication_id(message.deduplication_id)
                .build();
            replies.push((message.row_id, reply));
            request.push(entry);
        }
        let request = match request.into_iter().collect::<Result<Vec<_>, _>>() {
            Ok(request) => request,
            Err(error) => {
                let error = PublishError(format!("invalid SQS batch entry: {error}"));
                return answer_all(replies, &error);
            }
        };
        let client = self.client.get_or_init(sqs_client_from_env).await;
        metrics::count("LiveSendCalls", 1);
        let sent = client
            .send_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(request))
            .send()
            .await;
        let output = match sent {
            Ok(output) => output,
            Err(error) => {
                let error =
                    PublishError(aws_sdk_sqs::error::DisplayErrorContext(&error).to_string());
                tracing::warn!(entries, error = %error, "Live batch send failed");
                metrics::count("LiveSendFailedEntries", entries as u64);
                return answer_all(replies, &error);
            }
        };
        let mut outcomes: Vec<Option<Result<(), PublishError>>> = vec![None; entries];
        let slot = |id: &str| id.parse::<usize>().ok().filter(|index| *index < entries);
        for success in output.successful() {
            if let Some(index) = slot(success.id()) {
                outcomes[index] = Some(Ok(()));
            }
        }
        for failure in output.failed() {
            if let Some(index) = slot(failure.id()) {
                tracing::warn!(
                    outbox_id = %replies[index].0,
                    code = failure.code(),
                    sender_fault = failure.sender_fault(),
                    entries,
                    "Live batch entry refused"
                );
                outcomes[index] = Some(Err(PublishError(format!(
                    "SQS refused the message: {}: {}",
                    failure.code(),
                    failure.message().unwrap_or_default()
                ))));
            }
        }
        let mut failed = 0u64;
        for ((_, reply), outcome) in replies.into_iter().zip(outcomes) {
            let outcome = outcome
                .unwrap_or_else(|| Err(PublishError("SQS did not report this batch entry".into())));
            failed += u64::from(outcome.is_err());
            reply.send(outcome).ok();
        }
        if failed > 0 {
            metrics::count("LiveSendFailedEntries", failed);
        }
    }
}

fn answer_all(
    replies: Vec<(Uuid, oneshot::Sender<Result<(), PublishError>>)>,
    error: &PublishError,
) {
    for (_, reply) in replies {
        reply.send(Err(error.clone())).ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(names: &[&'static str]) -> Vec<(&'static str, usize)> {
        names.iter().map(|name| (*name, 100)).collect()
    }

    #[test]
    fn a_call_takes_at_most_ten_messages_oldest_first() {
        let names: Vec<String> = (0..25).map(|i| format!("g{i}")).collect();
        let queued: Vec<(&str, usize)> = names.iter().map(|n| (n.as_str(), 10)).collect();
        assert_eq!(select(queued), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn a_call_takes_one_message_per_group_and_leaves_the_later_ones() {
        let queued = groups(&["a", "a", "b", "a", "c", "b"]);
        assert_eq!(select(queued), vec![0, 2, 4]);
    }

    #[test]
    fn a_call_keeps_its_bodies_within_the_batch_byte_limit() {
        let queued = vec![
            ("a", 100_000),
            ("b", 100_000),
            ("c", 100_000),
            ("d", 62_144),
        ];
        // c would pass 256 KiB; d still fits exactly.
        assert_eq!(select(queued), vec![0, 1, 3]);
    }

    #[test]
    fn a_group_passed_over_for_size_keeps_its_later_messages_behind() {
        let queued = vec![("a", 200_000), ("b", 100_000), ("b", 10), ("c", 10)];
        // b's first message does not fit: b's second must not overtake it.
        assert_eq!(select(queued), vec![0, 3]);
    }

    #[test]
    fn a_message_larger_than_the_limit_goes_alone() {
        let queued = vec![("a", MAX_BATCH_BYTES + 1), ("b", 10), ("c", 10)];
        assert_eq!(select(queued), vec![0]);
        let behind = vec![("b", 10), ("a", MAX_BATCH_BYTES + 1), ("c", 10)];
        assert_eq!(select(behind), vec![0, 2]);
    }

    #[test]
    fn nothing_queued_selects_nothing() {
        assert!(select(Vec::<(&str, usize)>::new()).is_empty());
    }

    #[test]
    fn messages_whose_publisher_gave_up_are_dropped_unsent() {
        let batcher = SqsBatcher::new("http://127.0.0.1:9/queue.fifo", None);
        let message = |group: &str| BatchMessage {
            row_id: Uuid::new_v4(),
            body: "{}".into(),
            group_id: group.into(),
            deduplication_id: Uuid::new_v4().to_string(),
        };
        let (gone, gone_answer) = oneshot::channel();
        let (kept, _kept_answer) = oneshot::channel();
        let (later, _later_answer) = oneshot::channel();
        batcher.lock().extend([
            Queued {
                message: message("a"),
                reply: gone,
            },
            Queued {
                message: message("b"),
                reply: kept,
            },
            Queued {
                message: message("b"),
                reply: later,
            },
        ]);
        drop(gone_answer);
        let taken: Vec<String> = batcher
            .take()
            .into_iter()
            .map(|q| q.message.group_id)
            .collect();
        assert_eq!(taken, vec!["b"]);
        assert_eq!(batcher.lock().len(), 1, "b's later message stays queued");
    }
}
