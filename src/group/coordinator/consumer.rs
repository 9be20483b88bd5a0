//! KIP-848 consumer groups: the broker-driven protocol of `group.protocol=consumer`.
//!
//! A member sends ConsumerGroupHeartbeat with its subscription; the coordinator keeps
//! - the **group epoch**, bumped whenever what the assignment depends on changes (a member
//!   joins, leaves or changes its subscription; a subscribed topic gains partitions or a topic
//!   matching a regex appears);
//! - the **target assignment** at the assignment epoch, computed by the server-side assignor
//!   when the group epoch passes it;
//! - each member's **current assignment** and member epoch, reconciled toward the target one
//!   step per heartbeat: partitions the target takes away are revoked first (the member stays
//!   at its epoch, UNREVOKED_PARTITIONS, until its heartbeat no longer lists them), and a
//!   partition is given only once no other member holds it (UNRELEASED_PARTITIONS until then).
//!
//! Everything is written to `__consumer_offsets` as Kafka's records (key versions 3–8, see
//! [`crate::group::consumer_records`]) before it is answered, so a coordinator that takes over
//! replays the same state. Behaviour follows Kafka's `GroupMetadataManager.consumerGroupHeartbeat`
//! and `CurrentAssignmentBuilder`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{
    self as cgd, DescribedGroup as CgdGroup,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as HbAssignment, TopicPartitions as HbTopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use uuid::Uuid;

use crate::group::consumer_records::{
    self as cr, Assignment, CurrentAssignmentValue, MemberMetadataValue, TopicMetadata,
};
use crate::group::TopicRights;
use crate::metadata::{is_internal_topic, MetadataImage};

use super::assignor::{self, MemberSpec};
use super::state::Group;
use super::{code, s, Coordinator, GroupResponse, RequestContext, TimerKind};

/// The member epoch of a heartbeat that leaves the group.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// The member epoch of a static member's heartbeat that leaves for now (it keeps its
/// partitions until its session times out or it comes back).
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;
/// ConsumerGroupHeartbeat from this version on carries a member id chosen by the client.
const CLIENT_MEMBER_ID_VERSION: i16 = 1;

/// Kafka's `MemberState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemberState {
    #[default]
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

impl MemberState {
    fn code(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
        }
    }
    fn from_code(c: i8) -> MemberState {
        match c {
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Stable,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumerMember {
    pub member_id: String,
    pub meta: MemberMetadataValue,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

impl ConsumerMember {
    /// Kafka's `updateMemberEpoch`: the current epoch becomes the previous one, even when
    /// the new epoch is the same.
    fn set_epoch(&mut self, epoch: i32) {
        self.previous_member_epoch = self.member_epoch;
        self.member_epoch = epoch;
    }

    pub(super) fn is_reconciled_to(&self, epoch: i32) -> bool {
        self.state == MemberState::Stable && self.member_epoch == epoch
    }

    fn current_value(&self) -> CurrentAssignmentValue {
        CurrentAssignmentValue {
            member_epoch: self.member_epoch,
            previous_member_epoch: self.previous_member_epoch,
            state: self.state.code(),
            assigned: self.assigned.clone(),
            pending_revocation: self.pending_revocation.clone(),
        }
    }
}

/// A consumer group's state beside what every group keeps (offsets, see [`Group`]).
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: imbl::OrdMap<String, ConsumerMember>,
    /// Target assignment per member, at `assignment_epoch`.
    pub target: imbl::OrdMap<String, Assignment>,
    /// The subscribed topics as of the last epoch bump, by name.
    pub subscription: BTreeMap<String, TopicMetadata>,
    /// Each member's rights as of its last heartbeat: of the topics its regex matches it
    /// subscribes to those it may DESCRIBE (KAFKA-18813). Not persisted: a member not heard
    /// from since this node loaded the group keeps the topics of its regex already in
    /// `subscription` until its next heartbeat.
    pub rights: imbl::OrdMap<String, Arc<dyn TopicRights>>,
    /// Partition → epoch of the member that holds it (assigned or pending revocation).
    pub owners: imbl::HashMap<(Uuid, i32), i32>,
    /// Rebalances (group epoch bumps) since this node loaded or created the group, and how
    /// long the last one took from the bump until every member was reconciled (statistics,
    /// not persisted: they restart with the coordinator, as Kafka's sensors do).
    pub rebalances: u64,
    pub rebalance_started_ms: Option<i64>,
    pub last_rebalance_ms: Option<i64>,
}

/// What `/metrics` and the page show of one consumer group.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerGroupView {
    pub group_id: String,
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: usize,
    pub members_reconciling: usize,
    pub rebalances: u64,
    pub last_rebalance_ms: Option<i64>,
}

impl ConsumerGroup {
    /// Kafka's consumer group states.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.group_epoch > self.assignment_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| !m.is_reconciled_to(self.assignment_epoch))
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    pub(super) fn set_owners(&mut self, member: &ConsumerMember, own: bool) {
        for a in [&member.assigned, &member.pending_revocation] {
            for (t, ps) in a {
                for p in ps {
                    if own {
                        self.owners.insert((*t, *p), member.member_epoch);
                    } else {
                        self.owners.remove(&(*t, *p));
                    }
                }
            }
        }
    }

    pub fn view(&self, group_id: &str) -> ConsumerGroupView {
        ConsumerGroupView {
            group_id: group_id.to_owned(),
            state: self.state_name(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            members: self.members.len(),
            members_reconciling: self
                .members
                .values()
                .filter(|m| !m.is_reconciled_to(self.assignment_epoch))
                .count(),
            rebalances: self.rebalances,
            last_rebalance_ms: self.last_rebalance_ms,
        }
    }

    /// The group epoch moves on: a rebalance starts (unless one is under way).
    pub(super) fn bump_epoch(&mut self, now_ms: i64) {
        self.group_epoch += 1;
        self.rebalances += 1;
        self.rebalance_started_ms.get_or_insert(now_ms);
    }

    /// Ends the rebalance under way once every member is reconciled to the target; the
    /// group's state ([`Self::state_name`]).
    pub(super) fn note_progress(&mut self, now_ms: i64) -> &'static str {
        let state = self.state_name();
        if state == "Stable" || state == "Empty" {
            if let Some(start) = self.rebalance_started_ms.take() {
                self.last_rebalance_ms = Some(now_ms - start);
            }
        }
        state
    }

    /// The member `member_id`, or a new one (replay: its records come in any order).
    fn member_or_new(&self, member_id: &str) -> ConsumerMember {
        self.members
            .get(member_id)
            .cloned()
            .unwrap_or_else(|| ConsumerMember {
                member_id: member_id.to_owned(),
                ..Default::default()
            })
    }

    /// Replaces (or adds) a member, keeping `owners` in step.
    pub fn put_member(&mut self, member: ConsumerMember) {
        if let Some(old) = self.members.get(&member.member_id).cloned() {
            self.set_owners(&old, false);
        }
        self.set_owners(&member, true);
        self.members.insert(member.member_id.clone(), member);
    }

    pub fn drop_member(&mut self, member_id: &str) -> Option<ConsumerMember> {
        let old = self.members.remove(member_id)?;
        self.set_owners(&old, false);
        self.target.remove(member_id);
        self.rights.remove(member_id);
        Some(old)
    }

    /// Whether a commit (OffsetCommit, or TxnOffsetCommit when `transactional`) by
    /// `member_id` at `epoch` may go through: without a member epoch only while the group has
    /// no members (admin tools, `assign()`); otherwise by a member at its current epoch.
    pub fn validate_commit(
        &self,
        member_id: &str,
        epoch: i32,
        version_supports_epochs: bool,
        transactional: bool,
    ) -> Result<(), ResponseError> {
        // Without a member epoch (admin tools, `assign()`), only while the group has no
        // members (Kafka's `ConsumerGroup.validateOffsetCommit`).
        if epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let Some(m) = self.members.get(member_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        let classic = m.meta.classic.is_some();
        if !version_supports_epochs && !classic && !transactional {
            return Err(ResponseError::UnsupportedVersion);
        }
        if epoch != m.member_epoch {
            return Err(if transactional || classic {
                // A classic member's generation is its member epoch; TxnOffsetCommit has no
                // STALE_MEMBER_EPOCH and producers know ILLEGAL_GENERATION.
                ResponseError::IllegalGeneration
            } else {
                ResponseError::StaleMemberEpoch
            });
        }
        Ok(())
    }

    /// The assignor most members ask for, else the configured default (Kafka's preferred
    /// server assignor).
    pub fn preferred_assignor(&self, default: &str) -> String {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.meta.server_assignor.as_deref() {
                *votes.entry(a).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, std::cmp::Reverse(*name)))
            .and_then(|(name, _)| assignor::canonical_name(name))
            .unwrap_or(default)
            .to_owned()
    }
}

/// How many compiled subscription regexes are kept; past it the cache starts over.
const REGEX_CACHE_MAX: usize = 1024;

/// A compiled subscription regex: RE2 syntax (Kafka uses RE2/J), matched against the whole
/// topic name. Members heartbeat with the same few patterns over and over, so compiled ones
/// are kept (at most [`REGEX_CACHE_MAX`]); an invalid pattern is compiled again each time it
/// is sent, and refused.
fn compile_regex(pattern: &str) -> Result<std::sync::Arc<regex::Regex>, String> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<regex::Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(r) = cache.lock().expect("regex cache").get(pattern) {
        return Ok(r.clone());
    }
    let compiled =
        Arc::new(regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())?);
    let mut cache = cache.lock().expect("regex cache");
    if cache.len() >= REGEX_CACHE_MAX {
        cache.clear();
    }
    cache.insert(pattern.to_owned(), compiled.clone());
    Ok(compiled)
}

/// The topics of `image` the members subscribe to, by name or by regex (internal topics never
/// match a regex, as in Kafka). Of the topics a member's regex matches only those it may
/// DESCRIBE by its `rights` count; a member without rights here (not heard from since the
/// group was loaded) keeps those of `current`, the subscription so far.
pub(super) fn resolve_subscription<'a>(
    members: impl Iterator<Item = &'a ConsumerMember>,
    image: &MetadataImage,
    rights: &imbl::OrdMap<String, Arc<dyn TopicRights>>,
    current: &BTreeMap<String, TopicMetadata>,
) -> BTreeMap<String, TopicMetadata> {
    let mut names: BTreeSet<&str> = BTreeSet::new();
    // The regexes once each, with the rights they are resolved under (members of one
    // principal share them).
    let mut regexes: BTreeMap<&str, Vec<Option<&dyn TopicRights>>> = BTreeMap::new();
    for m in members {
        names.extend(m.meta.subscribed_topic_names.iter().map(String::as_str));
        if let Some(r) = m.meta.subscribed_topic_regex.as_deref() {
            let who = rights.get(&m.member_id).map(|a| &**a);
            let all = regexes.entry(r).or_default();
            if !all.iter().any(|w| same_rights(*w, who)) {
                all.push(who);
            }
        }
    }
    let mut out = BTreeMap::new();
    let mut add = |name: &str| {
        if let Some(t) = image.topic(name) {
            out.insert(
                name.to_owned(),
                TopicMetadata {
                    topic_id: t.id,
                    topic_name: name.to_owned(),
                    num_partitions: t.partitions.len() as i32,
                },
            );
        }
    };
    for n in names {
        add(n);
    }
    let compiled: Vec<(Arc<regex::Regex>, &Vec<Option<&dyn TopicRights>>)> = regexes
        .iter()
        .filter_map(|(r, who)| compile_regex(r).ok().map(|c| (c, who)))
        .collect();
    if !compiled.is_empty() {
        for name in image.topics.keys() {
            if is_internal_topic(name) {
                continue;
            }
            let seen = |who: &Option<&dyn TopicRights>| match who {
                Some(auth) => auth.may_describe(name),
                None => current.contains_key(name.as_str()),
            };
            if compiled
                .iter()
                .any(|(r, who)| r.is_match(name) && who.iter().any(seen))
            {
                add(name);
            }
        }
    }
    out
}

/// Whether two members' rights are the same principal's from the same host (or both unknown).
fn same_rights(a: Option<&dyn TopicRights>, b: Option<&dyn TopicRights>) -> bool {
    a.map(|a| a.caller()) == b.map(|b| b.caller())
}

/// The topic ids `member` subscribes to within `subscription`: those it names, and those its
/// regex matches that it may DESCRIBE by `rights` (all when it has none here: `subscription`
/// was resolved with them).
fn member_topics(
    member: &MemberMetadataValue,
    rights: Option<&dyn TopicRights>,
    subscription: &BTreeMap<String, TopicMetadata>,
) -> BTreeSet<Uuid> {
    let regex = member
        .subscribed_topic_regex
        .as_deref()
        .and_then(|r| compile_regex(r).ok());
    subscription
        .values()
        .filter(|t| {
            member.subscribed_topic_names.contains(&t.topic_name)
                || regex.as_ref().is_some_and(|r| {
                    !is_internal_topic(&t.topic_name)
                        && r.is_match(&t.topic_name)
                        && rights.is_none_or(|a| a.may_describe(&t.topic_name))
                })
        })
        .map(|t| t.topic_id)
        .collect()
}

fn owned_from_request(
    owned: &Option<
        Vec<kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions>,
    >,
) -> Option<Assignment> {
    owned.as_ref().map(|tps| {
        let mut a = Assignment::new();
        for tp in tps {
            a.entry(tp.topic_id)
                .or_default()
                .extend(tp.partitions.iter().copied());
        }
        a
    })
}

fn overlaps(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .any(|(t, ps)| b.get(t).is_some_and(|qs| !ps.is_disjoint(qs)))
}

fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .all(|(t, ps)| ps.is_empty() || b.get(t).is_some_and(|qs| ps.is_subset(qs)))
}

/// One reconciliation step of `member` toward `target` at `target_epoch` (Kafka's
/// `CurrentAssignmentBuilder`). `owned` is what the member's heartbeat says it holds (`None`
/// when the heartbeat left it out); `owner_epoch` who else holds a partition.
pub fn reconcile(
    member: &ConsumerMember,
    target_epoch: i32,
    target: &Assignment,
    owned: Option<&Assignment>,
    owner_epoch: impl Fn(&Uuid, i32) -> Option<i32>,
) -> ConsumerMember {
    let still_owns = |revoking: &Assignment| owned.is_none_or(|o| overlaps(o, revoking));
    match member.state {
        MemberState::Stable if member.member_epoch == target_epoch => member.clone(),
        MemberState::Stable => next_assignment(
            member,
            member.member_epoch,
            target_epoch,
            target,
            owned,
            &owner_epoch,
        ),
        MemberState::UnrevokedPartitions => {
            if still_owns(&member.pending_revocation) {
                return member.clone();
            }
            next_assignment(
                member,
                member.member_epoch + 1,
                target_epoch,
                target,
                owned,
                &owner_epoch,
            )
        }
        MemberState::UnreleasedPartitions => next_assignment(
            member,
            member.member_epoch,
            target_epoch,
            target,
            owned,
            &owner_epoch,
        ),
    }
}

fn next_assignment(
    member: &ConsumerMember,
    epoch: i32,
    target_epoch: i32,
    target: &Assignment,
    owned: Option<&Assignment>,
    owner_epoch: &impl Fn(&Uuid, i32) -> Option<i32>,
) -> ConsumerMember {
    let mut assigned = Assignment::new();
    let mut revoke = Assignment::new();
    let mut pending = Assignment::new();
    let mut unreleased = false;
    let topics: BTreeSet<&Uuid> = target.keys().chain(member.assigned.keys()).collect();
    for t in topics {
        let want = target.get(t).cloned().unwrap_or_default();
        let have = member.assigned.get(t).cloned().unwrap_or_default();
        let keep: BTreeSet<i32> = have.intersection(&want).copied().collect();
        let gone: BTreeSet<i32> = have.difference(&keep).copied().collect();
        let mut add: BTreeSet<i32> = want.difference(&keep).copied().collect();
        let before = add.len();
        add.retain(|p| owner_epoch(t, *p).is_none());
        unreleased |= add.len() != before;
        if !keep.is_empty() {
            assigned.insert(*t, keep);
        }
        if !gone.is_empty() {
            revoke.insert(*t, gone);
        }
        if !add.is_empty() {
            pending.insert(*t, add);
        }
    }
    let mut next = member.clone();
    next.pending_revocation = Assignment::new();
    let owns_revoked = owned.is_none_or(|o| overlaps(o, &revoke));
    if !revoke.is_empty() && owns_revoked {
        next.state = MemberState::UnrevokedPartitions;
        next.set_epoch(epoch);
        next.assigned = assigned;
        next.pending_revocation = revoke;
        return next;
    }
    for (t, ps) in pending {
        assigned.entry(t).or_default().extend(ps);
    }
    next.state = if unreleased {
        MemberState::UnreleasedPartitions
    } else {
        MemberState::Stable
    };
    next.set_epoch(target_epoch);
    next.assigned = assigned;
    next
}

fn hb_error(e: ResponseError, message: Option<String>) -> GroupResponse {
    GroupResponse::ConsumerGroupHeartbeat(
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code(e))
            .with_error_message(message.map(|m| s(&m))),
    )
}

fn hb_assignment(a: &Assignment) -> HbAssignment {
    HbAssignment::default().with_topic_partitions(
        a.iter()
            .map(|(t, ps)| {
                HbTopicPartitions::default()
                    .with_topic_id(*t)
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

impl Coordinator {
    pub(super) fn write_consumer_member(
        &mut self,
        partition: i32,
        group_id: &str,
        m: &ConsumerMember,
    ) {
        self.append(
            partition,
            cr::member_metadata_key(group_id, &m.member_id),
            Some(cr::encode_member_metadata_value(&m.meta)),
        );
    }

    pub(super) fn write_current_assignment(
        &mut self,
        partition: i32,
        group_id: &str,
        m: &ConsumerMember,
    ) {
        self.append(
            partition,
            cr::current_member_assignment_key(group_id, &m.member_id),
            Some(cr::encode_current_assignment_value(&m.current_value())),
        );
    }

    /// The subscribed topics' metadata (Kafka's `ConsumerGroupPartitionMetadata` record).
    pub(super) fn write_subscription(
        &mut self,
        partition: i32,
        group_id: &str,
        subscription: &BTreeMap<String, TopicMetadata>,
    ) {
        let topics: Vec<TopicMetadata> = subscription.values().cloned().collect();
        self.append(
            partition,
            cr::partition_metadata_key(group_id),
            Some(cr::encode_partition_metadata_value(&topics)),
        );
    }

    pub(super) fn write_group_epoch(&mut self, partition: i32, group_id: &str, epoch: i32) {
        self.append(
            partition,
            cr::group_metadata_key(group_id),
            Some(cr::encode_group_metadata_value(epoch)),
        );
    }

    pub(super) fn consumer_group_heartbeat(
        &mut self,
        ctx: &RequestContext,
        req: ConsumerGroupHeartbeatRequest,
        image: &MetadataImage,
        rights: Arc<dyn TopicRights>,
        now_ms: i64,
    ) {
        match self.heartbeat_inner(ctx, &req, image, rights, now_ms) {
            Ok(response) => {
                self.respond(ctx.token, GroupResponse::ConsumerGroupHeartbeat(response))
            }
            Err((e, message)) => self.respond(ctx.token, hb_error(e, message)),
        }
    }

    fn validate_heartbeat(
        &self,
        v: i16,
        req: &ConsumerGroupHeartbeatRequest,
    ) -> Result<(), (ResponseError, Option<String>)> {
        let invalid = |m: &str| Err((ResponseError::InvalidRequest, Some(m.to_owned())));
        if req.group_id.is_empty() {
            return invalid("GroupId can't be empty.");
        }
        if req.instance_id.as_ref().is_some_and(|i| i.is_empty()) {
            return invalid("InstanceId can't be empty.");
        }
        if req.rack_id.as_ref().is_some_and(|r| r.is_empty()) {
            return invalid("RackId can't be empty.");
        }
        if v >= CLIENT_MEMBER_ID_VERSION && req.member_id.is_empty() {
            return invalid("MemberId can't be empty.");
        }
        match req.member_epoch {
            e if e > 0 || e == LEAVE_GROUP_MEMBER_EPOCH => {
                if req.member_id.is_empty() {
                    return invalid("MemberId can't be empty.");
                }
            }
            0 => {
                if req.rebalance_timeout_ms == -1 {
                    return invalid("RebalanceTimeoutMs must be provided in first request.");
                }
                if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
                    return invalid("TopicPartitions must be empty when (re-)joining.");
                }
                let no_names = req
                    .subscribed_topic_names
                    .as_ref()
                    .is_none_or(|n| n.is_empty());
                if no_names && req.subscribed_topic_regex.is_none() {
                    return invalid(
                        "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
                    );
                }
            }
            LEAVE_GROUP_STATIC_MEMBER_EPOCH => {
                if req.member_id.is_empty() {
                    return invalid("MemberId can't be empty.");
                }
                if req.instance_id.is_none() {
                    return invalid("InstanceId can't be null.");
                }
            }
            _ => return invalid("MemberEpoch is invalid."),
        }
        if let Some(r) = req.subscribed_topic_regex.as_deref() {
            if let Err(e) = compile_regex(r) {
                return Err((
                    ResponseError::InvalidRegularExpression,
                    Some(format!(
                        "SubscribedTopicRegex `{r}` is not a valid regular expression: {e}."
                    )),
                ));
            }
        }
        if let Some(a) = req.server_assignor.as_deref() {
            if !self
                .config
                .consumer_assignors
                .iter()
                .any(|c| assignor::canonical_name(a) == Some(c.as_str()))
            {
                return Err((
                    ResponseError::UnsupportedAssignor,
                    Some(format!(
                        "ServerAssignor {a} is not supported. Supported assignors: {}.",
                        self.config.consumer_assignors.join(", ")
                    )),
                ));
            }
        }
        Ok(())
    }

    fn heartbeat_inner(
        &mut self,
        ctx: &RequestContext,
        req: &ConsumerGroupHeartbeatRequest,
        image: &MetadataImage,
        rights: Arc<dyn TopicRights>,
        now_ms: i64,
    ) -> Result<ConsumerGroupHeartbeatResponse, (ResponseError, Option<String>)> {
        self.validate_heartbeat(ctx.api_version, req)?;
        let group_id = req.group_id.0.to_string();
        self.check_coordinator(&group_id).map_err(|e| (e, None))?;
        let partition = self.shard_of(&group_id);
        let epoch = req.member_epoch;

        // The group: a consumer group, or created by a join; an empty classic group (offsets
        // only) becomes a consumer group as in Kafka.
        let mut group = match self.group(&group_id) {
            Some(g) => match &g.consumer {
                Some(c) => c.clone(),
                None if epoch == 0 && g.members.is_empty() && g.pending_members.is_empty() => {
                    let persisted = g.generation_id > 0 || g.protocol_type.is_some();
                    let g = self.group_mut(&group_id).expect("exists");
                    g.become_consumer_group();
                    if persisted {
                        self.append(
                            partition,
                            crate::group::records::encode_group_metadata_key(&group_id),
                            None,
                        );
                    }
                    ConsumerGroup::default()
                }
                None if epoch == 0 => self.upgrade_to_consumer_group(
                    &group_id,
                    req.instance_id.as_deref(),
                    image,
                    now_ms,
                )?,
                None => {
                    return Err((
                        ResponseError::GroupIdNotFound,
                        Some(format!("Group {group_id} is not a consumer group.")),
                    ))
                }
            },
            None if epoch == 0 => {
                let mut g = Group::new(group_id.clone(), partition, now_ms);
                g.become_consumer_group();
                self.insert_group(g);
                ConsumerGroup::default()
            }
            None => {
                return Err((
                    ResponseError::GroupIdNotFound,
                    Some(format!("Consumer group {group_id} not found.")),
                ))
            }
        };

        let member_id = if req.member_id.is_empty() {
            self.new_member_id_uuid()
        } else {
            req.member_id.to_string()
        };
        let instance_id = req.instance_id.as_ref().map(|i| i.to_string());
        // A static member's instance id names one member: another member id with it (a zombie
        // of a member that was replaced) is fenced (Kafka's `throwIfInstanceIdIsFenced`).
        if let (Some(i), true) = (&instance_id, epoch != 0) {
            if let Some(holder) = group
                .members
                .values()
                .find(|m| m.meta.instance_id.as_deref() == Some(i.as_str()))
            {
                if holder.member_id != member_id {
                    return Err((
                        ResponseError::FencedInstanceId,
                        Some(format!(
                            "Static member {member_id} with instance id {i} was replaced by {}.",
                            holder.member_id
                        )),
                    ));
                }
            }
        }

        if epoch == LEAVE_GROUP_MEMBER_EPOCH || epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            let Some(member) = group.members.get(&member_id).cloned() else {
                return Err((
                    ResponseError::UnknownMemberId,
                    Some(format!(
                        "Member {member_id} is not a member of group {group_id}."
                    )),
                ));
            };
            if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                // Kept with its assigned partitions until its session times out or it
                // rejoins; what it was revoking is released at once (Kafka's
                // `consumerGroupStaticMemberGroupLeave`).
                let mut left = member;
                left.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
                left.pending_revocation = Assignment::new();
                self.write_current_assignment(partition, &group_id, &left);
                group.put_member(left);
                self.store_consumer_group(&group_id, group);
            } else {
                if self.fence_consumer_member(&group_id, &mut group, &member_id, now_ms) {
                    self.store_consumer_group(&group_id, group);
                }
            }
            return Ok(ConsumerGroupHeartbeatResponse::default()
                .with_member_id(Some(s(&member_id)))
                .with_member_epoch(epoch));
        }

        let max = self.config.consumer_max_size;
        let existing = group.members.get(&member_id).cloned();
        let mut replaced_static: Option<String> = None;
        let member = match existing {
            Some(m) => {
                if epoch > 0 {
                    let owned = owned_from_request(&req.topic_partitions);
                    if epoch > m.member_epoch
                        || (epoch < m.member_epoch
                            && (epoch != m.previous_member_epoch
                                || !owned.as_ref().is_some_and(|o| is_subset(o, &m.assigned))))
                    {
                        return Err((
                            ResponseError::FencedMemberEpoch,
                            Some(format!(
                                "The consumer group member has a different member epoch ({epoch}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                                m.member_epoch
                            )),
                        ));
                    }
                }
                m
            }
            None if epoch > 0 => {
                return Err((
                    ResponseError::UnknownMemberId,
                    Some(format!(
                        "Member {member_id} is not a member of group {group_id}."
                    )),
                ))
            }
            None => {
                // A static member coming back under a new member id takes over from the one
                // that left with epoch -2; one still active keeps its instance id.
                let previous = instance_id.as_deref().and_then(|i| {
                    group
                        .members
                        .values()
                        .find(|m| m.meta.instance_id.as_deref() == Some(i))
                        .cloned()
                });
                match previous {
                    // A classic static member is replaced by the consumer-protocol member
                    // with its instance id (Kafka only refuses two consumer-protocol members).
                    Some(p)
                        if p.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
                            && p.meta.classic.is_none() =>
                    {
                        return Err((
                            ResponseError::UnreleasedInstanceId,
                            Some(format!(
                                "Static member {} with instance id {} is still active.",
                                p.member_id,
                                instance_id.as_deref().unwrap_or("")
                            )),
                        ))
                    }
                    Some(p) => {
                        // Kafka's `replaceMember`: the new id takes over the old one's
                        // subscription, assignment and target, at epoch 0.
                        replaced_static = Some(p.member_id.clone());
                        ConsumerMember {
                            member_id: member_id.clone(),
                            member_epoch: 0,
                            previous_member_epoch: 0,
                            ..p
                        }
                    }
                    None => {
                        if group.members.len() >= max {
                            return Err((
                                ResponseError::GroupMaxSizeReached,
                                Some(format!(
                                    "The consumer group has reached its maximum capacity of {max} members."
                                )),
                            ));
                        }
                        ConsumerMember {
                            member_id: member_id.clone(),
                            ..Default::default()
                        }
                    }
                }
            }
        };
        if let Some(old) = &replaced_static {
            self.replace_static_member(partition, &group_id, &mut group, old, &member);
        }
        let is_new = !group.members.contains_key(&member_id);

        // 1. The member's subscription; a change bumps the group epoch.
        let mut updated = member.clone();
        let meta = &mut updated.meta;
        if let Some(i) = &instance_id {
            meta.instance_id = Some(i.clone());
        }
        if let Some(r) = &req.rack_id {
            meta.rack_id = Some(r.to_string());
        }
        if req.rebalance_timeout_ms != -1 {
            meta.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        if let Some(a) = &req.server_assignor {
            meta.server_assignor = Some(a.to_string());
        }
        if let Some(names) = &req.subscribed_topic_names {
            let mut names: Vec<String> = names.iter().map(|n| n.0.to_string()).collect();
            names.sort();
            names.dedup();
            meta.subscribed_topic_names = names;
        }
        if let Some(r) = &req.subscribed_topic_regex {
            meta.subscribed_topic_regex = if r.is_empty() {
                None
            } else {
                Some(r.to_string())
            };
        }
        meta.client_id = ctx.client_id.clone();
        meta.client_host = ctx.client_host.clone();
        // A member of the consumer protocol (Kafka's `setClassicMemberMetadata(null)`).
        meta.classic = None;
        let mut bump = false;
        if is_new || updated.meta != member.meta {
            self.write_consumer_member(partition, &group_id, &updated);
            bump = is_new
                || updated.meta.subscribed_topic_names != member.meta.subscribed_topic_names
                || updated.meta.subscribed_topic_regex != member.meta.subscribed_topic_regex;
        }
        if is_new {
            // Not yet reconciled: it joins with no partitions at epoch 0.
            group.put_member(updated.clone());
        } else {
            let mut m = group.members.get(&member_id).cloned().expect("member");
            m.meta = updated.meta.clone();
            group.put_member(m);
        }

        // 2. What the members subscribe to, as the metadata image has it now, the topics of
        // this member's regex as far as it may DESCRIBE them.
        let regex_topics_before = updated.meta.subscribed_topic_regex.as_ref().map(|_| {
            member_topics(
                &updated.meta,
                group.rights.get(&member_id).map(|a| &**a),
                &group.subscription,
            )
        });
        group.rights.insert(member_id.clone(), rights);
        let subscription = resolve_subscription(
            group.members.values(),
            image,
            &group.rights,
            &group.subscription,
        );
        if subscription != group.subscription {
            self.write_subscription(partition, &group_id, &subscription);
            group.subscription = subscription;
            bump = true;
        } else if let Some(before) = regex_topics_before {
            // The same topics for the group, but not those this member may see (its rights
            // changed, or are known again after a reload).
            let rights = group.rights.get(&member_id).map(|a| &**a);
            bump |= member_topics(&updated.meta, rights, &group.subscription) != before;
        }
        if bump {
            group.bump_epoch(now_ms);
            self.write_group_epoch(partition, &group_id, group.group_epoch);
        }

        // 3. A new target assignment when the group epoch passed it.
        if group.group_epoch > group.assignment_epoch {
            self.update_target_assignment(partition, &group_id, &mut group);
        }

        // 4. One reconciliation step of this member.
        let member = group.members.get(&member_id).cloned().expect("member");
        let target = group.target.get(&member_id).cloned().unwrap_or_default();
        let owned = owned_from_request(&req.topic_partitions);
        let reconciled = if member.is_reconciled_to(group.assignment_epoch) {
            member.clone()
        } else {
            let owners = group.owners.clone();
            reconcile(
                &member,
                group.assignment_epoch,
                &target,
                owned.as_ref(),
                |t, p| owners.get(&(*t, p)).copied(),
            )
        };
        if reconciled != member || is_new {
            self.write_current_assignment(partition, &group_id, &reconciled);
            let rebalance_timer = TimerKind::ConsumerRebalance {
                member_id: member_id.clone(),
            };
            if reconciled.state == MemberState::UnrevokedPartitions {
                let timeout = i64::from(reconciled.meta.rebalance_timeout_ms.max(0));
                self.schedule(&group_id, rebalance_timer, now_ms + timeout);
            } else {
                self.cancel(&group_id, rebalance_timer);
            }
        }
        let assignment_changed = reconciled.assigned != member.assigned || is_new;
        group.put_member(reconciled.clone());
        let state = group.note_progress(now_ms);
        let interval = self.heartbeat_interval(state);
        tracing::debug!(
            group = %group_id,
            member = %member_id,
            epoch = reconciled.member_epoch,
            group_epoch = group.group_epoch,
            state = ?reconciled.state,
            group_state = state,
            interval,
            "consumer group heartbeat"
        );
        self.store_consumer_group(&group_id, group);
        self.schedule(
            &group_id,
            TimerKind::ConsumerSession {
                member_id: member_id.clone(),
            },
            now_ms + i64::from(self.config.consumer_session_timeout_ms),
        );

        let full = epoch == 0
            || (req.rebalance_timeout_ms != -1
                && (req.subscribed_topic_names.is_some() || req.subscribed_topic_regex.is_some())
                && req.topic_partitions.is_some());
        let mut response = ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(s(&member_id)))
            .with_member_epoch(reconciled.member_epoch)
            .with_heartbeat_interval_ms(interval);
        if full || assignment_changed {
            response = response.with_assignment(Some(hb_assignment(&reconciled.assigned)));
        }
        Ok(response)
    }

    /// The heartbeat interval answered to a member of a group in `state`:
    /// `group.consumer.heartbeat.interval.ms` while it is Stable, the reconciling interval while
    /// it is not (Assigning or Reconciling: some member does not hold its target yet). A member
    /// learns what changes only from its heartbeats. Waiting for partitions another member is revoking, it then hears of
    /// their release a short interval after it rather than a whole one; and a member given
    /// partitions that a member joining a moment later is to take hears of that just as soon.
    /// So each step of a rebalance after the first costs the short interval, and only while one
    /// is under way. The clients all take the interval of each response (the Java consumer,
    /// librdkafka, franz-go).
    pub(super) fn heartbeat_interval(&self, state: &str) -> i32 {
        let interval = self.config.consumer_heartbeat_interval_ms;
        if state == "Stable" {
            interval
        } else {
            self.config
                .consumer_reconciling_heartbeat_interval_ms
                .min(interval)
        }
    }

    /// Kafka's `replaceMember`: the static member `old` goes (its records are tombstoned) and
    /// `new`, under its own id, takes its place and its target assignment.
    pub(super) fn replace_static_member(
        &mut self,
        partition: i32,
        group_id: &str,
        group: &mut ConsumerGroup,
        old: &str,
        new: &ConsumerMember,
    ) {
        let target = group.target.get(old).cloned().unwrap_or_default();
        self.remove_consumer_member_records(partition, group_id, old);
        group.drop_member(old);
        self.write_consumer_member(partition, group_id, new);
        self.append(
            partition,
            cr::target_assignment_member_key(group_id, &new.member_id),
            Some(cr::encode_target_assignment_member_value(&target)),
        );
        group.target.insert(new.member_id.clone(), target);
        self.write_current_assignment(partition, group_id, new);
        group.put_member(new.clone());
    }

    /// Computes the target assignment at the group epoch and writes what changed.
    pub(super) fn update_target_assignment(
        &mut self,
        partition: i32,
        group_id: &str,
        group: &mut ConsumerGroup,
    ) {
        let assignor_name = group.preferred_assignor(self.config.default_assignor());
        let partitions: BTreeMap<Uuid, i32> = group
            .subscription
            .values()
            .map(|t| (t.topic_id, t.num_partitions))
            .collect();
        let specs: BTreeMap<String, MemberSpec> = group
            .members
            .iter()
            .map(|(id, m)| {
                (
                    id.clone(),
                    MemberSpec {
                        subscribed: member_topics(
                            &m.meta,
                            group.rights.get(id).map(|a| &**a),
                            &group.subscription,
                        ),
                        previous: group.target.get(id).cloned().unwrap_or_default(),
                        owned: m.assigned.clone(),
                    },
                )
            })
            .collect();
        let target = assignor::assign(&assignor_name, &specs, &partitions);
        for (member, assignment) in &target {
            if group.target.get(member) != Some(assignment) {
                self.append(
                    partition,
                    cr::target_assignment_member_key(group_id, member),
                    Some(cr::encode_target_assignment_member_value(assignment)),
                );
            }
        }
        group.target = target.into_iter().collect();
        group.assignment_epoch = group.group_epoch;
        self.append(
            partition,
            cr::target_assignment_metadata_key(group_id),
            Some(cr::encode_target_assignment_metadata_value(
                group.assignment_epoch,
            )),
        );
    }

    pub(super) fn remove_consumer_member_records(
        &mut self,
        partition: i32,
        group_id: &str,
        member_id: &str,
    ) {
        self.append(
            partition,
            cr::current_member_assignment_key(group_id, member_id),
            None,
        );
        self.append(
            partition,
            cr::target_assignment_member_key(group_id, member_id),
            None,
        );
        self.append(
            partition,
            cr::member_metadata_key(group_id, member_id),
            None,
        );
        self.cancel(
            group_id,
            TimerKind::ConsumerSession {
                member_id: member_id.to_owned(),
            },
        );
        self.cancel(
            group_id,
            TimerKind::ConsumerRebalance {
                member_id: member_id.to_owned(),
            },
        );
        self.cancel(
            group_id,
            TimerKind::ClassicMemberDeadline {
                member_id: member_id.to_owned(),
            },
        );
    }

    /// Removes a member (it left, its session expired or it did not revoke in time): its
    /// records are tombstoned, its partitions are free and the group epoch is bumped. When
    /// only classic members remain, the group converts back to a classic group instead
    /// (online downgrade) and `false` is returned: the caller must not store `group`.
    pub(super) fn fence_consumer_member(
        &mut self,
        group_id: &str,
        group: &mut ConsumerGroup,
        member_id: &str,
        now_ms: i64,
    ) -> bool {
        if self.downgrade_on_leave(group, member_id) {
            self.downgrade_to_classic_group(group_id, group, Some(member_id), now_ms);
            return false;
        }
        let partition = self.shard_of(group_id);
        self.remove_consumer_member_records(partition, group_id, member_id);
        group.drop_member(member_id);
        // The subscription shrinks to what the members left subscribe to (no topic appears:
        // the image is not needed), so the next heartbeat does not bump the epoch again.
        let kept: BTreeSet<Uuid> = group
            .members
            .values()
            .flat_map(|m| {
                member_topics(
                    &m.meta,
                    group.rights.get(&m.member_id).map(|a| &**a),
                    &group.subscription,
                )
            })
            .collect();
        if group
            .subscription
            .values()
            .any(|t| !kept.contains(&t.topic_id))
        {
            group.subscription.retain(|_, t| kept.contains(&t.topic_id));
            self.write_subscription(partition, group_id, &group.subscription);
        }
        group.bump_epoch(now_ms);
        self.write_group_epoch(partition, group_id, group.group_epoch);
        group.note_progress(now_ms);
        true
    }

    /// An empty consumer group stops being one (a classic member joins, or it is deleted): its
    /// group-level records are tombstoned, the group epoch's last.
    pub(super) fn end_consumer_group(&mut self, group_id: &str) {
        let partition = self.shard_of(group_id);
        for key in [
            cr::target_assignment_metadata_key(group_id),
            cr::partition_metadata_key(group_id),
            cr::group_metadata_key(group_id),
        ] {
            self.append(partition, key, None);
        }
        if let Some(g) = self.group_mut(group_id) {
            g.consumer = None;
        }
    }

    pub(super) fn store_consumer_group(&mut self, group_id: &str, group: ConsumerGroup) {
        if let Some(g) = self.group_mut(group_id) {
            g.consumer = Some(group);
        }
    }

    /// A member's session or rebalance timeout passed.
    pub(super) fn on_consumer_timer(
        &mut self,
        group_id: &str,
        member_id: &str,
        rebalance: bool,
        now_ms: i64,
    ) {
        let Some(mut group) = self.group(group_id).and_then(|g| g.consumer.clone()) else {
            return;
        };
        let Some(member) = group.members.get(member_id) else {
            return;
        };
        if rebalance
            && (member.state != MemberState::UnrevokedPartitions
                || member.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        {
            return;
        }
        tracing::info!(
            group = group_id,
            member = member_id,
            "consumer group member fenced: {}",
            if rebalance {
                "it did not revoke its partitions within its rebalance timeout"
            } else {
                "its session timed out"
            }
        );
        if self.fence_consumer_member(group_id, &mut group, member_id, now_ms) {
            self.store_consumer_group(group_id, group);
        }
    }

    /// The consumer groups this node coordinates, as durable state has them.
    pub fn consumer_group_views(&self) -> Vec<ConsumerGroupView> {
        let mut views: Vec<ConsumerGroupView> = self
            .durable_groups()
            .filter_map(|g| g.consumer.as_ref().map(|c| c.view(&g.group_id)))
            .collect();
        views.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        views
    }

    /// Classic groups this node coordinates (with members or offsets), as durable state has
    /// them.
    pub fn classic_group_count(&self) -> usize {
        self.durable_groups()
            .filter(|g| g.consumer.is_none())
            .count()
    }

    pub(super) fn new_member_id_uuid(&mut self) -> String {
        self.member_id_counter += 1;
        let a = super::splitmix64(self.member_id_seed ^ self.member_id_counter);
        let b = super::splitmix64(a ^ self.member_id_counter.rotate_left(32));
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&a.to_be_bytes());
        bytes[8..].copy_from_slice(&b.to_be_bytes());
        // Kafka's member ids are its Uuid's URL-safe base64 form.
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    pub(super) fn consumer_group_describe(
        &mut self,
        ctx: &RequestContext,
        req: ConsumerGroupDescribeRequest,
        image: &MetadataImage,
    ) {
        let groups = req
            .group_ids
            .iter()
            .map(|gid| {
                let base = CgdGroup::default()
                    .with_group_id(gid.clone())
                    .with_authorized_operations(i32::MIN);
                if let Err(e) = self.check_coordinator(gid) {
                    return base.with_error_code(code(e));
                }
                let not_found = |m: String| {
                    base.clone()
                        .with_error_code(code(ResponseError::GroupIdNotFound))
                        .with_error_message(Some(s(&m)))
                };
                let Some(group) = self.durable_group(gid.as_str()) else {
                    return not_found(format!("Group {} not found.", gid.as_str()));
                };
                let Some(c) = &group.consumer else {
                    return not_found(format!("Group {} is not a consumer group.", gid.as_str()));
                };
                describe_consumer_group(base.clone(), c, image, self.config.default_assignor())
            })
            .collect();
        self.respond(
            ctx.token,
            GroupResponse::ConsumerGroupDescribe(
                ConsumerGroupDescribeResponse::default().with_groups(groups),
            ),
        );
    }
}

fn describe_consumer_group(
    base: CgdGroup,
    c: &ConsumerGroup,
    image: &MetadataImage,
    default_assignor: &str,
) -> CgdGroup {
    let describe = |a: &Assignment| {
        cgd::Assignment::default().with_topic_partitions(
            a.iter()
                .map(|(t, ps)| {
                    cgd::TopicPartitions::default()
                        .with_topic_id(*t)
                        .with_topic_name(TopicName(s(image
                            .topic_names_by_id
                            .get(t)
                            .map(String::as_str)
                            .unwrap_or(""))))
                        .with_partitions(ps.iter().copied().collect())
                })
                .collect(),
        )
    };
    base.with_group_state(s(c.state_name()))
        .with_group_epoch(c.group_epoch)
        .with_assignment_epoch(c.assignment_epoch)
        .with_assignor_name(s(&c.preferred_assignor(default_assignor)))
        .with_members(
            c.members
                .values()
                .map(|m| {
                    cgd::Member::default()
                        .with_member_id(s(&m.member_id))
                        .with_instance_id(m.meta.instance_id.as_deref().map(s))
                        .with_rack_id(m.meta.rack_id.as_deref().map(s))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(s(&m.meta.client_id))
                        .with_client_host(s(&m.meta.client_host))
                        .with_subscribed_topic_names(
                            m.meta
                                .subscribed_topic_names
                                .iter()
                                .map(|n| TopicName(s(n)))
                                .collect(),
                        )
                        .with_subscribed_topic_regex(
                            m.meta.subscribed_topic_regex.as_deref().map(s),
                        )
                        .with_assignment(describe(&m.assigned))
                        .with_target_assignment(describe(
                            &c.target.get(&m.member_id).cloned().unwrap_or_default(),
                        ))
                        // 0: the classic protocol, 1: the consumer protocol.
                        .with_member_type(if m.meta.classic.is_some() { 0 } else { 1 })
                })
                .collect(),
        )
}

// ------------------------------------------------------------------------------ replay

/// Applies one consumer-group record at load time.
pub(super) fn replay(
    group: &mut ConsumerGroup,
    key: &cr::ConsumerKey,
    value: Option<&[u8]>,
) -> Result<(), crate::group::records::RecordError> {
    use cr::ConsumerKey as K;
    match (key, value) {
        (K::GroupMetadata { .. }, Some(v)) => {
            group.group_epoch = cr::decode_group_metadata_value(v)?
        }
        (K::GroupMetadata { .. }, None) => {}
        (K::PartitionMetadata { .. }, Some(v)) => {
            group.subscription = cr::decode_partition_metadata_value(v)?
                .into_iter()
                .map(|t| (t.topic_name.clone(), t))
                .collect();
        }
        (K::PartitionMetadata { .. }, None) => group.subscription.clear(),
        (K::MemberMetadata { member, .. }, Some(v)) => {
            let meta = cr::decode_member_metadata_value(v)?;
            let mut m = group.member_or_new(member);
            m.meta = meta;
            group.put_member(m);
        }
        (K::MemberMetadata { member, .. }, None) => {
            if let Some(m) = group.members.get(member).cloned() {
                group.set_owners(&m, false);
                group.members.remove(member);
                group.rights.remove(member);
            }
        }
        (K::TargetAssignmentMetadata { .. }, Some(v)) => {
            group.assignment_epoch = cr::decode_target_assignment_metadata_value(v)?
        }
        (K::TargetAssignmentMetadata { .. }, None) => {}
        (K::TargetAssignmentMember { member, .. }, Some(v)) => {
            group.target.insert(
                member.clone(),
                cr::decode_target_assignment_member_value(v)?,
            );
        }
        (K::TargetAssignmentMember { member, .. }, None) => {
            group.target.remove(member);
        }
        (K::CurrentMemberAssignment { member, .. }, Some(v)) => {
            let value = cr::decode_current_assignment_value(v)?;
            let mut m = group.member_or_new(member);
            m.member_epoch = value.member_epoch;
            m.previous_member_epoch = value.previous_member_epoch;
            m.state = MemberState::from_code(value.state);
            m.assigned = value.assigned;
            m.pending_revocation = value.pending_revocation;
            group.put_member(m);
        }
        (K::CurrentMemberAssignment { member, .. }, None) => {
            if let Some(mut m) = group.members.get(member).cloned() {
                m.assigned.clear();
                m.pending_revocation.clear();
                group.put_member(m);
            }
        }
    }
    Ok(())
}

impl Group {
    /// Turns this (new or empty classic) group into a consumer group.
    pub(super) fn become_consumer_group(&mut self) {
        self.consumer = Some(ConsumerGroup::default());
        self.protocol_type = None;
        self.protocol_name = None;
        self.generation_id = 0;
        self.leader_id = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn member(epoch: i32, assigned: Assignment) -> ConsumerMember {
        ConsumerMember {
            member_id: "m".into(),
            member_epoch: epoch,
            previous_member_epoch: epoch - 1,
            assigned,
            ..Default::default()
        }
    }

    #[test]
    fn revocation_comes_before_the_new_epoch() {
        let m = member(1, [(t(1), [0, 1, 2].into())].into());
        let target: Assignment = [(t(1), [0, 1].into())].into();
        let owned: Assignment = [(t(1), [0, 1, 2].into())].into();
        let next = reconcile(&m, 2, &target, Some(&owned), |_, _| None);
        assert_eq!(next.state, MemberState::UnrevokedPartitions);
        assert_eq!(next.member_epoch, 1, "stays at its epoch until it revoked");
        assert_eq!(next.assigned, [(t(1), [0, 1].into())].into());
        assert_eq!(next.pending_revocation, [(t(1), [2].into())].into());
        // Still listing partition 2: nothing changes.
        assert_eq!(
            reconcile(&next, 2, &target, Some(&owned), |_, _| None),
            next
        );
        // Revoked: the member moves to the target epoch.
        let owned: Assignment = [(t(1), [0, 1].into())].into();
        let done = reconcile(&next, 2, &target, Some(&owned), |_, _| None);
        assert_eq!(done.state, MemberState::Stable);
        assert_eq!(done.member_epoch, 2);
        assert!(done.pending_revocation.is_empty());
    }

    #[test]
    fn a_partition_still_held_elsewhere_is_not_given() {
        let m = member(1, Assignment::new());
        let target: Assignment = [(t(1), [0, 1].into())].into();
        let next = reconcile(&m, 2, &target, Some(&Assignment::new()), |_, p| {
            (p == 1).then_some(1)
        });
        assert_eq!(next.state, MemberState::UnreleasedPartitions);
        assert_eq!(next.member_epoch, 2);
        assert_eq!(next.assigned, [(t(1), [0].into())].into());
        // Released: the next step gives it.
        let next = reconcile(&next, 2, &target, Some(&next.assigned.clone()), |_, _| None);
        assert_eq!(next.state, MemberState::Stable);
        assert_eq!(next.assigned, target);
    }

    #[test]
    fn group_states_follow_epochs_and_reconciliation() {
        let mut g = ConsumerGroup::default();
        assert_eq!(g.state_name(), "Empty");
        g.put_member(member(0, Assignment::new()));
        g.group_epoch = 1;
        assert_eq!(g.state_name(), "Assigning");
        g.assignment_epoch = 1;
        assert_eq!(g.state_name(), "Reconciling");
        let mut m = member(1, [(t(1), [0].into())].into());
        m.state = MemberState::Stable;
        g.put_member(m);
        assert_eq!(g.state_name(), "Stable");
        assert_eq!(g.owners.get(&(t(1), 0)), Some(&1));
        g.drop_member("m");
        assert!(g.owners.is_empty());
    }
}
