//! Response shapes: every response the machine sends, built at the version of its request, and
//! the conversions the shell needs (codec types, error-only answers, failed writes).

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    describe_groups_response::{DescribedGroup, DescribedGroupMember},
    join_group_response::JoinGroupResponseMember,
    offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic},
    offset_fetch_response::{OffsetFetchResponsePartition, OffsetFetchResponsePartitions},
    DeleteGroupsResponse, DescribeGroupsResponse, GroupId, HeartbeatResponse, JoinGroupResponse,
    LeaveGroupResponse, ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetDeleteResponse, OffsetFetchResponse, SyncGroupResponse,
};

use crate::group::records::OffsetCommitValue;

use super::state::{Group, GroupState};
use super::{code, s, GroupRequest, GroupResponse};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

pub(super) fn join_error(v: i16, e: ResponseError, member_id: &str) -> GroupResponse {
    let mut r = JoinGroupResponse::default()
        .with_error_code(code(e))
        .with_member_id(s(member_id));
    if v >= 7 {
        r = r.with_protocol_name(None);
    }
    GroupResponse::JoinGroup(r)
}

pub(super) fn join_success(
    group: &Group,
    v: i16,
    member_id: &str,
    with_members: bool,
    skip_assignment: bool,
) -> GroupResponse {
    let protocol = group.protocol_name.clone().unwrap_or_default();
    let members = if with_members {
        group
            .members_in_join_order()
            .into_iter()
            .map(|m| {
                let mut r = JoinGroupResponseMember::default()
                    .with_member_id(s(&m.member_id))
                    .with_metadata(m.metadata_for(&protocol));
                if v >= 5 {
                    r = r.with_group_instance_id(m.group_instance_id.as_deref().map(s));
                }
                r
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut r = JoinGroupResponse::default()
        .with_generation_id(group.generation_id)
        .with_protocol_name(Some(s(&protocol)))
        .with_leader(s(group.leader_id.as_deref().unwrap_or("")))
        .with_member_id(s(member_id))
        .with_members(members);
    if v >= 7 {
        r = r.with_protocol_type(group.protocol_type.as_deref().map(s));
    }
    if v >= 9 {
        r = r.with_skip_assignment(skip_assignment);
    }
    GroupResponse::JoinGroup(r)
}

pub(super) fn sync_error(_v: i16, e: ResponseError) -> GroupResponse {
    // member_assignment is always present (empty, never null): franz-go and others read it
    // unconditionally.
    GroupResponse::SyncGroup(
        SyncGroupResponse::default()
            .with_error_code(code(e))
            .with_assignment(Bytes::new()),
    )
}

pub(super) fn sync_success(group: &Group, v: i16, assignment: &Bytes) -> GroupResponse {
    let mut r = SyncGroupResponse::default().with_assignment(assignment.clone());
    if v >= 5 {
        r = r
            .with_protocol_type(group.protocol_type.as_deref().map(s))
            .with_protocol_name(group.protocol_name.as_deref().map(s));
    }
    GroupResponse::SyncGroup(r)
}

/// A TxnOffsetCommit answer giving every partition of `req` the error `code` (0: none).
pub fn txn_offset_commit_all(req: &TxnOffsetCommitRequest, code: i16) -> TxnOffsetCommitResponse {
    use kafka_protocol::messages::txn_offset_commit_response::{
        TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
    };
    TxnOffsetCommitResponse::default().with_topics(
        req.topics
            .iter()
            .map(|t| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

pub(super) fn offset_commit_all(
    req: &OffsetCommitRequest,
    error: Option<ResponseError>,
) -> GroupResponse {
    let error = error.map_or(0, code);
    GroupResponse::OffsetCommit(
        OffsetCommitResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    OffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(error)
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    )
}

pub(super) fn fetched_partition(
    p: i32,
    value: Option<OffsetCommitValue>,
    v: i16,
) -> OffsetFetchResponsePartition {
    let r = OffsetFetchResponsePartition::default().with_partition_index(p);
    match value {
        Some(o) => {
            let r = r
                .with_committed_offset(o.committed_offset)
                .with_metadata(Some(s(&o.metadata)));
            if v >= 5 {
                r.with_committed_leader_epoch(o.leader_epoch)
            } else {
                r
            }
        }
        None => r.with_committed_offset(-1),
    }
}

pub(super) fn fetched_partitions(
    p: i32,
    value: Option<OffsetCommitValue>,
) -> OffsetFetchResponsePartitions {
    let r = OffsetFetchResponsePartitions::default().with_partition_index(p);
    match value {
        Some(o) => r
            .with_committed_offset(o.committed_offset)
            .with_committed_leader_epoch(o.leader_epoch)
            .with_metadata(Some(s(&o.metadata))),
        None => r.with_committed_offset(-1),
    }
}

pub(super) fn describe_group(group: &Group, v: i16) -> DescribedGroup {
    let stable = group.state == GroupState::Stable;
    let protocol = if stable {
        group.protocol_name.clone().unwrap_or_default()
    } else {
        String::new()
    };
    let members = group
        .members_in_join_order()
        .into_iter()
        .map(|m| {
            let mut r = DescribedGroupMember::default()
                .with_member_id(s(&m.member_id))
                .with_client_id(s(&m.client_id))
                .with_client_host(s(&m.client_host));
            if v >= 4 {
                r = r.with_group_instance_id(m.group_instance_id.as_deref().map(s));
            }
            if stable {
                r = r
                    .with_member_metadata(m.metadata_for(&protocol))
                    .with_member_assignment(m.assignment.clone());
            }
            r
        })
        .collect();
    DescribedGroup::default()
        .with_group_id(GroupId(s(&group.group_id)))
        .with_group_state(s(group.state.name()))
        .with_protocol_type(s(group.protocol_type.as_deref().unwrap_or("")))
        .with_protocol_data(s(&protocol))
        .with_members(members)
}

impl GroupResponse {
    /// The response as the codec's [`kafka_protocol::messages::ResponseKind`].
    pub fn into_response_kind(self) -> kafka_protocol::messages::ResponseKind {
        use kafka_protocol::messages::ResponseKind as K;
        match self {
            GroupResponse::JoinGroup(r) => K::JoinGroup(r),
            GroupResponse::SyncGroup(r) => K::SyncGroup(r),
            GroupResponse::Heartbeat(r) => K::Heartbeat(r),
            GroupResponse::LeaveGroup(r) => K::LeaveGroup(r),
            GroupResponse::OffsetCommit(r) => K::OffsetCommit(r),
            GroupResponse::OffsetFetch(r) => K::OffsetFetch(r),
            GroupResponse::ListGroups(r) => K::ListGroups(r),
            GroupResponse::DescribeGroups(r) => K::DescribeGroups(r),
            GroupResponse::DeleteGroups(r) => K::DeleteGroups(r),
            GroupResponse::OffsetDelete(r) => K::OffsetDelete(r),
            GroupResponse::TxnOffsetCommit(r) => K::TxnOffsetCommit(r),
            GroupResponse::ConsumerGroupHeartbeat(r) => K::ConsumerGroupHeartbeat(r),
            GroupResponse::ConsumerGroupDescribe(r) => K::ConsumerGroupDescribe(r),
        }
    }

    /// The API this response answers.
    pub fn api_key(&self) -> kafka_protocol::messages::ApiKey {
        use kafka_protocol::messages::ApiKey as A;
        match self {
            GroupResponse::JoinGroup(_) => A::JoinGroup,
            GroupResponse::SyncGroup(_) => A::SyncGroup,
            GroupResponse::Heartbeat(_) => A::Heartbeat,
            GroupResponse::LeaveGroup(_) => A::LeaveGroup,
            GroupResponse::OffsetCommit(_) => A::OffsetCommit,
            GroupResponse::OffsetFetch(_) => A::OffsetFetch,
            GroupResponse::ListGroups(_) => A::ListGroups,
            GroupResponse::DescribeGroups(_) => A::DescribeGroups,
            GroupResponse::DeleteGroups(_) => A::DeleteGroups,
            GroupResponse::OffsetDelete(_) => A::OffsetDelete,
            GroupResponse::TxnOffsetCommit(_) => A::TxnOffsetCommit,
            GroupResponse::ConsumerGroupHeartbeat(_) => A::ConsumerGroupHeartbeat,
            GroupResponse::ConsumerGroupDescribe(_) => A::ConsumerGroupDescribe,
        }
    }
}

impl GroupRequest {
    /// The API of this request.
    pub fn api_key(&self) -> kafka_protocol::messages::ApiKey {
        use kafka_protocol::messages::ApiKey as A;
        match self {
            GroupRequest::JoinGroup(..) => A::JoinGroup,
            GroupRequest::SyncGroup(_) => A::SyncGroup,
            GroupRequest::Heartbeat(_) => A::Heartbeat,
            GroupRequest::LeaveGroup(_) => A::LeaveGroup,
            GroupRequest::OffsetCommit(_) => A::OffsetCommit,
            GroupRequest::OffsetFetch(_) => A::OffsetFetch,
            GroupRequest::ListGroups(_) => A::ListGroups,
            GroupRequest::DescribeGroups(_) => A::DescribeGroups,
            GroupRequest::DeleteGroups(_) => A::DeleteGroups,
            GroupRequest::OffsetDelete(_) => A::OffsetDelete,
            GroupRequest::TxnOffsetCommit(_) => A::TxnOffsetCommit,
            GroupRequest::ConsumerGroupHeartbeat(..) => A::ConsumerGroupHeartbeat,
            GroupRequest::ConsumerGroupDescribe(..) => A::ConsumerGroupDescribe,
        }
    }
}

impl GroupResponse {
    /// The records behind this response could not be made durable: turn its successes into
    /// `error`, as Kafka does when a coordinator write fails.
    pub fn fail_writes(&mut self, error: ResponseError) {
        let c = code(error);
        match self {
            GroupResponse::JoinGroup(r) if r.error_code == 0 => r.error_code = c,
            GroupResponse::SyncGroup(r) if r.error_code == 0 => r.error_code = c,
            GroupResponse::LeaveGroup(r) if r.error_code == 0 => r.error_code = c,
            GroupResponse::OffsetCommit(r) => {
                for p in r.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                    if p.error_code == 0 {
                        p.error_code = c;
                    }
                }
            }
            GroupResponse::DeleteGroups(r) => {
                for g in r.results.iter_mut().filter(|g| g.error_code == 0) {
                    g.error_code = c;
                }
            }
            GroupResponse::OffsetDelete(r) if r.error_code == 0 => r.error_code = c,
            GroupResponse::ConsumerGroupHeartbeat(r) if r.error_code == 0 => {
                *r = kafka_protocol::messages::ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(c)
            }
            GroupResponse::TxnOffsetCommit(r) => {
                for p in r.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                    if p.error_code == 0 {
                        p.error_code = c;
                    }
                }
            }
            _ => {}
        }
    }

    /// [`GroupResponse::fail_writes`] for a response that answers for several groups, whose
    /// records may live in different partitions (DeleteGroups): each group's success becomes
    /// `error_of(group_id)` if that is `Some`. Other responses are left alone.
    pub fn fail_writes_per_group(&mut self, error_of: impl Fn(&str) -> Option<ResponseError>) {
        if let GroupResponse::DeleteGroups(r) = self {
            for g in r.results.iter_mut().filter(|g| g.error_code == 0) {
                if let Some(e) = error_of(g.group_id.as_str()) {
                    g.error_code = code(e);
                }
            }
        }
    }

    /// A response to `api` carrying only a top-level `error` (used when no answer can be had).
    pub fn error_only(api: kafka_protocol::messages::ApiKey, error: ResponseError) -> Self {
        use kafka_protocol::messages::ApiKey as A;
        let c = code(error);
        match api {
            A::JoinGroup => join_error(0, error, ""),
            A::SyncGroup => sync_error(0, error),
            A::LeaveGroup => {
                GroupResponse::LeaveGroup(LeaveGroupResponse::default().with_error_code(c))
            }
            A::OffsetCommit => GroupResponse::OffsetCommit(OffsetCommitResponse::default()),
            A::OffsetFetch => {
                GroupResponse::OffsetFetch(OffsetFetchResponse::default().with_error_code(c))
            }
            A::ListGroups => {
                GroupResponse::ListGroups(ListGroupsResponse::default().with_error_code(c))
            }
            A::DescribeGroups => GroupResponse::DescribeGroups(DescribeGroupsResponse::default()),
            A::DeleteGroups => GroupResponse::DeleteGroups(DeleteGroupsResponse::default()),
            A::OffsetDelete => {
                GroupResponse::OffsetDelete(OffsetDeleteResponse::default().with_error_code(c))
            }
            A::TxnOffsetCommit => GroupResponse::TxnOffsetCommit(Default::default()),
            A::ConsumerGroupHeartbeat => GroupResponse::ConsumerGroupHeartbeat(
                kafka_protocol::messages::ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(c),
            ),
            A::ConsumerGroupDescribe => GroupResponse::ConsumerGroupDescribe(Default::default()),
            _ => GroupResponse::Heartbeat(HeartbeatResponse::default().with_error_code(c)),
        }
    }
}
