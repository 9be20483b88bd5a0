//! Every bound the broker enforces, in one place.
//!
//! A limit that is also a Kafka configuration key (`socket.request.max.bytes`,
//! `max.connections`, ...) has its Kafka default here and its configured value in
//! [`crate::config::BrokerConfig`]. The rest are fixed bounds that keep memory proportional to
//! what a client is allowed to send; each says why it has the value it has.

/// Default of `socket.request.max.bytes`: Kafka's 100 MiB. A frame's length prefix is checked
/// against the configured value before a single byte of the body is allocated.
pub const FRAME_BYTES_MAX_DEFAULT: usize = 104_857_600;

/// Default of `max.connections`. Kafka's default is `Int.MaxValue`; we pick a bound that a
/// single process can actually hold open with its per-connection buffers.
pub const CONNECTIONS_MAX_DEFAULT: usize = 10_000;

/// Requests read from one connection but not yet answered. Kafka's network layer stops reading a
/// connection while one request is in flight; we pipeline up to this many so a client with
/// `max.in.flight.requests.per.connection=5` is never throttled by us, and stop reading beyond it.
pub const IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX: usize = 64;

/// Longest a Fetch may be parked waiting for `min_bytes`. Clients send `fetch.max.wait.ms`
/// (500 ms default); a hostile value must not park a request for days.
pub const FETCH_WAIT_MS_MAX: i64 = 60_000;

/// Longest an acks=all Produce may be parked waiting for the high watermark. Kafka uses the
/// request's `timeout_ms` (30 s default); we honour it up to this bound.
pub const PRODUCE_TIMEOUT_MS_MAX: i64 = 300_000;

/// Longest a DeleteRecords may be parked waiting for the replicas' log start offsets (Kafka's
/// `DelayedDeleteRecords` uses the request's `timeout_ms`); we honour it up to this bound.
pub const DELETE_RECORDS_TIMEOUT_MS_MAX: i64 = 300_000;

/// Delayed operations (parked fetches and produces) the purgatory holds across all partitions.
/// Beyond this a request is answered immediately with what is available.
pub const PURGATORY_OPERATIONS_MAX: usize = 100_000;

/// Incremental fetch sessions (KIP-227) kept at once; Kafka's `max.incremental.fetch.session.cache.slots`.
pub const FETCH_SESSIONS_MAX: usize = 1_000;

/// A fetch session idle this long may be evicted for a new one, and one created this long ago
/// may be evicted by a more valuable one; Kafka's fixed `MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`.
pub const FETCH_SESSION_EVICTION_MS: i64 = 120_000;

/// Partitions one fetch session may track. Sessions are per client; a hostile client must not
/// grow one session without bound.
pub const FETCH_SESSION_PARTITIONS_MAX: usize = 10_000;

/// Kafka's default for `message.max.bytes` / topic `max.message.bytes` (1 MiB + 12 bytes of
/// log overhead).
pub const MESSAGE_BYTES_MAX_DEFAULT: u32 = 1_048_588;

/// Largest partition count one CreateTopics / CreatePartitions request may ask for per topic.
/// Kafka has no hard bound but every partition costs open files; this keeps a typo from creating
/// a million directories.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// Longest topic name Kafka accepts (`Topic.MAX_NAME_LENGTH`).
pub const TOPIC_NAME_CHARS_MAX: usize = 249;

/// Partitions one DescribeTopicPartitions response describes at most, whatever the request's
/// `response_partition_limit`; the client pages through the rest with the cursor. Kafka's
/// `max.request.partition.size.limit` default.
pub const DESCRIBE_TOPIC_PARTITIONS_PER_RESPONSE_MAX: i32 = 2_000;

/// One entry of the metadata log (a batch of records committed together), and so one record at
/// most. Records are tiny (a topic, a partition, a config); a frame claiming more than this is
/// corruption, not data.
pub const METADATA_RECORD_BYTES_MAX: usize = 1 << 20;

/// Longest string (host, topic name, config name or value) a metadata record can hold: its
/// length is a u16 on disk, with 0xFFFF meaning "absent". The controller refuses longer values
/// (INVALID_CONFIG for a config value) instead of storing a cut one.
pub const METADATA_STRING_BYTES_MAX: usize = u16::MAX as usize - 1;

/// Leader and ISR changes the image keeps per partition, with their causes
/// (`metadata::history`): enough to see the last few failovers, elections and ISR shrinks and
/// expansions; older ones are dropped. About 60 bytes each, so 16 cost ~1 KiB per partition.
pub const LEADERSHIP_HISTORY_PER_PARTITION_MAX: usize = 16;

/// Changes `/api/history` returns at most, newest first (the page's "recent changes").
pub const HISTORY_API_CHANGES_MAX: usize = 500;

/// Records one client-initiated metadata change (a CreateTopics request, a CreatePartitions, an
/// ElectLeaders, ...) may write. Kafka's controller refuses an operation past its
/// `MAX_RECORDS_PER_USER_OP` (10,000) with POLICY_VIOLATION, and commits what it accepts as one
/// atomic batch; so does ours, whose bound is larger so that one topic at
/// `PARTITIONS_PER_TOPIC_MAX` with every topic config is still one operation. The encoded records
/// must also fit one log entry (`METADATA_RECORD_BYTES_MAX`): that is what makes them atomic.
/// Only the controller's own changes (a broker's registration re-electing every partition it
/// hosts) may span entries, and each of their records stands alone.
pub const METADATA_RECORDS_PER_USER_OP_MAX: usize = 12_000;
const _: () = assert!(METADATA_RECORDS_PER_USER_OP_MAX > PARTITIONS_PER_TOPIC_MAX as usize + 100);

/// Delayed operations one partition keeps in its watch list before pruning those that are gone
/// (answered or timed out); the global bound on parked operations is
/// `PURGATORY_OPERATIONS_MAX`.
pub const PARTITION_WATCHERS_PRUNE_AT: usize = 1_024;

/// How often high watermarks are written to `replication-offset-checkpoint`
/// (Kafka's `replica.high.watermark.checkpoint.interval.ms`).
pub const HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS: u64 = 5_000;

/// The runtime probe's sleep (`kafkaiq_runtime_wake_lateness_ms`): one observation per wake-up.
/// A stall longer than this is always seen; a shorter one in proportion to its length. 5 ms
/// keeps an idle broker's wake-ups at 200 a second.
pub const RUNTIME_PROBE_INTERVAL_MS: u64 = 5;

/// How often `flush.ms` and producer expiry run (retention follows
/// `log.retention.check.interval.ms`).
pub const LOG_PERIODIC_INTERVAL_MS: u64 = 1_000;

/// Kafka's `log.initial.task.delay.ms`: the first retention check waits this long after start
/// (or one interval, if shorter).
pub const LOG_RETENTION_INITIAL_DELAY_MS: i64 = 30_000;

/// Largest metadata snapshot (the whole image as records): about 4,000 × the 10,000-partition
/// topic limit. A snapshot file or snapshot message claiming more is corruption. The controller
/// keeps the image below it (client changes that would cross it are refused) and never writes a
/// larger snapshot.
pub const METADATA_SNAPSHOT_BYTES_MAX: usize = 256 * 1024 * 1024;

/// The metadata log is compacted into a snapshot once this many entries follow the last one,
/// which bounds both its length and the replay at startup.
pub const METADATA_SNAPSHOT_ENTRIES: usize = 4_096;

/// What a Raft snapshot message adds around the snapshot itself (header, protobuf framing).
pub const CONTROLLER_FRAME_OVERHEAD_BYTES: usize = 64 * 1024;

/// Largest Raft frame the controller listener reads: a message of up to one chunk
/// (`quorum::chunks::RAFT_CHUNK_BYTES`), or one chunk of a larger message, and its header.
pub const RAFT_FRAME_BYTES_MAX: usize = 64 * 1024 + CONTROLLER_FRAME_OVERHEAD_BYTES;

/// Largest frame the controller listener reads for an API that is neither a Raft message
/// (which may carry a snapshot) nor a metadata change forwarded from a client (bounded as the
/// client listener bounds it, `socket.request.max.bytes`): the broker lifecycle, AlterPartition,
/// ApiVersions, DescribeQuorum, the observers' fetch. The largest of them, an AlterPartition
/// naming every partition a leader has, is a few hundred KiB at 10,000 partitions.
pub const CONTROLLER_REQUEST_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Raft messages queued for one peer voter; beyond it a message is dropped and the peer
/// reported unreachable (the library resends what matters).
pub const RAFT_PEER_QUEUE_MESSAGES_MAX: usize = 1_024;

/// Raft messages from peers waiting for the controller thread; beyond it a message is dropped
/// (Raft resends what matters), so a peer flooding the controller listener cannot grow the
/// queue without bound.
pub const RAFT_INBOUND_QUEUE_MESSAGES_MAX: usize = 4_096;

/// Longest wait before the Raft transport tries a failed peer again.
pub const RAFT_RECONNECT_BACKOFF_MS_MAX: u64 = 1_000;

/// How long a forwarded request may take at the active controller (it waits for the quorum
/// to commit, up to `CONTROLLER_WRITE_TIMEOUT_MS`, plus the round trip).
pub const CONTROLLER_FORWARD_TIMEOUT_MS: u64 = CONTROLLER_WRITE_TIMEOUT_MS + 5_000;

/// How soon a broker tries the next controller after a registration or heartbeat failed.
pub const BROKER_LIFECYCLE_RETRY_MS: u64 = 100;

/// Requests waiting for the controller task; a sender beyond it waits (backpressure instead of
/// an unbounded queue).
pub const CONTROLLER_QUEUE_REQUESTS_MAX: usize = 1_024;

/// How long the controller waits for the quorum to commit a pass before it answers
/// REQUEST_TIMED_OUT (the outcome is then unknown: the entries may still commit). Kafka's
/// controller write timeout is 30 s as well.
pub const CONTROLLER_WRITE_TIMEOUT_MS: u64 = 30_000;

/// Requests the controller decides and commits in one pass (one write, one fsync).
pub const CONTROLLER_BATCH_REQUESTS_MAX: usize = 256;

/// Preferred leader elections one automatic rebalancing pass makes at most (Kafka's
/// `MAX_ELECTIONS_PER_IMBALANCE`): one pass is one batch of metadata records, and a cluster with
/// many imbalanced partitions (after a broker restart) is rebalanced over several passes, each
/// [`LEADER_IMBALANCE_RECHECK_MS`] after the last, rather than in one burst that moves every
/// leadership at once.
pub const LEADER_ELECTIONS_PER_IMBALANCE_PASS_MAX: usize = 1_000;

/// Delay before the next rebalancing pass when the last one stopped at
/// [`LEADER_ELECTIONS_PER_IMBALANCE_PASS_MAX`] (Kafka reschedules after about 10 ms).
pub const LEADER_IMBALANCE_RECHECK_MS: u64 = 10;

/// Partition changes one controlled-shutdown step makes at most (its leaderships moved first,
/// then its follower ISR memberships). A shutting-down broker's leaderships move in batches of
/// this size, so clients see leaders change gradually (Kafka moves them all in one batch;
/// AutoMQ#3505 is the complaint) and one step's records stay far below a metadata entry's size.
pub const CONTROLLED_SHUTDOWN_CHANGES_PER_STEP_MAX: usize = 500;

/// Producer ids are handed out by the controller in blocks, like Kafka's
/// `AllocateProducerIds`, so one metadata record covers many InitProducerId calls.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1_000;

/// Writes of one `__consumer_offsets` partition appended but not yet covered by the high
/// watermark, each holding a snapshot of the partition's coordinator state. While the high
/// watermark is stuck every operation adds one; past this bound the oldest snapshot is dropped,
/// which only delays when its state becomes visible.
pub const GROUP_PENDING_WRITES_PER_PARTITION_MAX: usize = 1_024;
// ---- The inter-broker client (`crate::client`) ----

/// Kafka's `max.in.flight.requests.per.connection` default: requests a client connection has
/// written but not yet seen answered. The request after these waits for a response.
pub const CLIENT_IN_FLIGHT_REQUESTS_DEFAULT: usize = 5;

/// Largest in-flight bound a client may be configured with. The Raft transport pipelines more
/// than the fetcher; beyond this a peer that stops answering would hold too many requests.
pub const CLIENT_IN_FLIGHT_REQUESTS_MAX: usize = 1_024;

/// Requests one destination queues while its connection is busy, connecting or backing off.
/// A sender beyond it waits (or, for `try_send_and_forget`, is refused): backpressure instead
/// of an unbounded queue.
pub const CLIENT_QUEUED_REQUESTS_PER_NODE_MAX: usize = 1_024;

/// Destination nodes one client keeps state for. A node talks to the other brokers and
/// controllers of its cluster; more than this is a bug in the caller, not a big cluster.
pub const CLIENT_NODES_MAX: usize = 4_096;

/// Kafka's `request.timeout.ms` default: how long a request may take from the call until its
/// response, queueing and connecting included. A request that is still unanswered then fails
/// and its connection is closed.
pub const CLIENT_REQUEST_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// Kafka's `replica.socket.timeout.ms` default, the replica fetcher's request timeout.
pub const REPLICA_SOCKET_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// Kafka's `socket.connection.setup.timeout.ms` default: the longest a TCP connect may take.
pub const CLIENT_CONNECT_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// Kafka's `reconnect.backoff.ms` default: the wait before reconnecting after the first failure.
pub const CLIENT_RECONNECT_BACKOFF_MS_DEFAULT: u64 = 50;

/// Kafka's `reconnect.backoff.max.ms` default: the backoff doubles per consecutive failure up to
/// this (then ± the jitter).
pub const CLIENT_RECONNECT_BACKOFF_MS_MAX_DEFAULT: u64 = 1_000;

/// Kafka's reconnect jitter (`ClusterConnectionStates`: ±20 %), so nodes that lost the same peer
/// do not reconnect in lockstep.
pub const CLIENT_RECONNECT_BACKOFF_JITTER_PERCENT: u64 = 20;

/// Kafka's client `connections.max.idle.ms` default (9 minutes): a client connection with
/// nothing in flight for this long is closed by the client. It is below the server's 10-minute
/// default so the client, not the server, closes idle connections; a request written just as
/// the server closes would otherwise have an unknown outcome.
pub const CLIENT_CONNECTION_IDLE_MS_MAX_DEFAULT: u64 = 540_000;

/// Largest response frame a client accepts unless configured otherwise, checked against the
/// size prefix before the body is allocated. Inter-broker responses other than fetches are
/// small (a Metadata response for 10,000 partitions is about 1 MiB); the guarded decoder may
/// allocate a small multiple of the frame, so the bound is kept well below
/// `socket.request.max.bytes`.
pub const CLIENT_RESPONSE_BYTES_MAX_DEFAULT: usize = 32 * 1024 * 1024;

/// How long an AlterPartition refused as a whole (NOT_CONTROLLER, the controller unreachable)
/// or a partition told to retry waits before it is sent again: Kafka's `AlterPartitionManager`
/// reschedules after 50 ms, long enough for a new controller to be found, short enough that an
/// ISR change is not held up.
pub const ALTER_PARTITION_RETRY_BACKOFF_MS: u64 = 50;

/// Largest `num.replica.fetchers`: each fetcher holds one connection to each source broker
/// and one task. Kafka has no bound; a typo must not open thousands of connections.
pub const REPLICA_FETCHERS_PER_BROKER_MAX: usize = 64;

/// Kafka's `replica.fetch.response.max.bytes` default. It is a soft bound: a fetch response
/// also carries the first batch of the first partition whole, however large.
pub const REPLICA_FETCH_RESPONSE_BYTES_MAX_DEFAULT: usize = 10 * 1024 * 1024;

/// Bytes a fetch response frame may hold beyond its records' bound: headers, per-partition
/// fields, aborted transactions.
pub const FETCH_RESPONSE_FRAME_OVERHEAD_BYTES: usize = 1024 * 1024;

/// Largest ApiVersions response accepted while a connection is set up. Kafka 4.1 lists about
/// 90 APIs in under 2 KiB.
pub const CLIENT_API_VERSIONS_RESPONSE_BYTES_MAX: usize = 1024 * 1024;

/// Connection events a subscriber may fall behind by before it sees `Lagged`.
pub const CLIENT_EVENTS_QUEUED_MAX: usize = 256;

/// HTTP connections (`http.listener`: metrics, the leadership page, its JSON API) open at once;
/// one more is closed on accept. A Prometheus server and a few browser tabs need a handful;
/// the bound keeps a misbehaving scraper from taking the broker's file descriptors or time.
pub const HTTP_CONNECTIONS_MAX: usize = 16;

/// HTTP connections one client address may hold open at once, so that one client
/// reconnecting in a loop (or holding silent connections) cannot take every one of the
/// `HTTP_CONNECTIONS_MAX` slots; half of them leaves room for a browser's six parallel
/// connections and a scraper on the same host.
pub const HTTP_CONNECTIONS_PER_CLIENT_MAX: usize = 8;

/// Largest HTTP request head (request line and headers) read; a larger one is answered 431.
/// No request the listener serves has a body, and browsers send well under 8 KiB of headers.
pub const HTTP_REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;

/// How long a client has to send its whole request head (answered 408 after it), so a slow or
/// silent connection cannot hold one of the `HTTP_CONNECTIONS_MAX` slots.
pub const HTTP_REQUEST_TIMEOUT_MS: u64 = 5_000;

/// How long writing one response may take before the connection is dropped.
pub const HTTP_RESPONSE_WRITE_TIMEOUT_MS: u64 = 10_000;

/// Bytes one step of a move between log dirs (AlterReplicaLogDirs) copies from the current log
/// to the future log, under the partition's lock: appends wait at most for one such copy
/// (Kafka's alter-log-dirs fetches are bounded by `replica.fetch.max.bytes`, 1 MiB).
pub const LOG_DIR_MOVE_STEP_BYTES_MAX: usize = 1 << 20;

/// Descriptors kept free for client and peer connections: the bound on open `.log` files
/// ([`log_handle_limits`]) leaves them out of `RLIMIT_NOFILE`, so a broker holding more
/// partitions than it can keep open still accepts connections. Under a soft limit below four
/// times this, a quarter of the limit is kept instead.
pub const CONNECTION_DESCRIPTOR_RESERVE: u64 = 1_024;

/// Descriptors the process needs beside logs and connections: stdio, the runtime's epoll and
/// event descriptors, the metadata log, and short-lived files (checkpoints, producer
/// snapshots, index resizes and fsyncs). Under a soft limit below eight times this, an eighth
/// of the limit is kept instead.
pub const PROCESS_DESCRIPTOR_MARGIN: u64 = 256;

/// Smallest bound on open `.log` descriptors, however low `RLIMIT_NOFILE` is: below it a few
/// busy partitions would reopen their files on every request.
pub const OPEN_LOG_FILES_MIN: u64 = 64;

/// Largest bound on open `.log` descriptors: Linux's default `fs.nr_open`, which caps
/// `RLIMIT_NOFILE` anyway (and stands in for an unlimited one).
pub const OPEN_LOG_FILES_MAX: u64 = 1 << 20;

/// Share of `vm.max_map_count` (maps per process) index maps may take, in percent. The rest is
/// for the allocator's arenas, thread stacks, libraries and the kernel's own splits of them.
pub const INDEX_MAPS_MAX_MAP_COUNT_PERCENT: u64 = 50;

/// Linux's default `vm.max_map_count`, used when `/proc/sys/vm/max_map_count` cannot be read.
pub const MAX_MAP_COUNT_DEFAULT: u64 = 65_530;

/// Bounds on what the logs keep open, derived from the process's limits: open `.log`
/// descriptors are the soft `RLIMIT_NOFILE` minus [`CONNECTION_DESCRIPTOR_RESERVE`] and
/// [`PROCESS_DESCRIPTOR_MARGIN`] (each scaled down under a low limit), at least
/// [`OPEN_LOG_FILES_MIN`]; index maps are [`INDEX_MAPS_MAX_MAP_COUNT_PERCENT`] of
/// `vm.max_map_count`. Beyond them the least recently used are closed and reopen by path when
/// next used (`kafkaiq_storage::handles`).
pub fn log_handle_limits(
    soft_open_files: u64,
    max_map_count: u64,
) -> kafkaiq_storage::HandleLimits {
    let reserve = CONNECTION_DESCRIPTOR_RESERVE.min(soft_open_files / 4);
    let margin = PROCESS_DESCRIPTOR_MARGIN.min(soft_open_files / 8);
    let files = soft_open_files
        .saturating_sub(reserve + margin)
        .clamp(OPEN_LOG_FILES_MIN, OPEN_LOG_FILES_MAX);
    let maps = (max_map_count.saturating_mul(INDEX_MAPS_MAX_MAP_COUNT_PERCENT) / 100)
        .max(OPEN_LOG_FILES_MIN);
    kafkaiq_storage::HandleLimits {
        open_log_files_max: files as usize,
        index_maps_max: maps as usize,
    }
}

/// The soft `RLIMIT_NOFILE` now (after [`raise_open_files_limit`]).
pub fn open_files_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes a plain struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(lim.rlim_cur)
}

/// `vm.max_map_count`, or Linux's default when it cannot be read.
pub fn max_map_count() -> u64 {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(MAX_MAP_COUNT_DEFAULT)
}

/// [`log_handle_limits`] for this process.
pub fn process_log_handle_limits() -> kafkaiq_storage::HandleLimits {
    let soft = open_files_limit().unwrap_or(OPEN_LOG_FILES_MAX);
    log_handle_limits(soft, max_map_count())
}

/// Idle `.log` descriptors the broker closes at once when an `accept` fails for want of
/// descriptors (EMFILE, ENFILE), so the next connection finds one.
pub const ACCEPT_DESCRIPTOR_SHORTAGE_RELEASE: usize = 64;

/// Longest wait between two `accept` attempts after failures (doubling from 5 ms): a listener
/// out of descriptors neither spins nor stops.
pub const ACCEPT_FAILURE_BACKOFF_MS_MAX: u64 = 1_000;

/// The soft and hard `RLIMIT_NOFILE` before and after [`raise_open_files_limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFilesLimit {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as Kafka's startup scripts advise
/// operators to do: the soft limit (often 1,024) is what bounds partitions and connections, and
/// an unprivileged process may lift it up to the hard limit. Returns both values so the caller
/// logs them.
pub fn raise_open_files_limit() -> std::io::Result<OpenFilesLimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read a plain struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let soft_before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        lim = raised;
    }
    Ok(OpenFilesLimit {
        soft_before,
        soft: lim.rlim_cur,
        hard: lim.rlim_max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_handle_limits_leave_the_connection_reserve_and_scale_down_under_low_limits() {
        let l = log_handle_limits(20_000, 65_530);
        assert_eq!(l.open_log_files_max, 20_000 - 1_024 - 256);
        assert_eq!(l.index_maps_max, 32_765);
        // 1,024: a quarter for connections, an eighth for the process.
        assert_eq!(log_handle_limits(1_024, 65_530).open_log_files_max, 640);
        assert_eq!(log_handle_limits(100, 0).open_log_files_max, 64);
        assert_eq!(log_handle_limits(100, 0).index_maps_max, 64);
        assert_eq!(
            log_handle_limits(u64::MAX, 65_530).open_log_files_max,
            OPEN_LOG_FILES_MAX as usize
        );
    }
}
