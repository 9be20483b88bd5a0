//! Admin views of groups: ListGroups, DescribeGroups and DeleteGroups.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    delete_groups_response::DeletableGroupResult, describe_groups_response::DescribedGroup,
    list_groups_response::ListedGroup, DeleteGroupsRequest, DeleteGroupsResponse,
    DescribeGroupsRequest, DescribeGroupsResponse, GroupId, ListGroupsRequest, ListGroupsResponse,
};

use crate::group::records;

use super::responses::describe_group;
use super::state::{Group, GroupState};
use super::{code, s, Coordinator, GroupResponse, PartitionStatus, RequestContext};

impl Coordinator {
    pub(super) fn list_groups(&mut self, ctx: &RequestContext, req: ListGroupsRequest) {
        let v = ctx.api_version;
        let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
        let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
        let loading = self
            .shards
            .values()
            .any(|s| s.status == PartitionStatus::Loading);
        let mut listed: Vec<&Group> = self
            .durable_groups()
            .filter(|g| g.state != GroupState::Dead)
            .filter(|g| states.is_empty() || states.contains(&g.state_name().to_lowercase()))
            .filter(|g| types.is_empty() || types.iter().any(|t| t == g.type_name()))
            .collect();
        listed.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        let groups = listed
            .into_iter()
            .map(|g| {
                let mut listed = ListedGroup::default()
                    .with_group_id(GroupId(s(&g.group_id)))
                    .with_protocol_type(s(match &g.consumer {
                        Some(_) => "consumer",
                        None => g.protocol_type.as_deref().unwrap_or(""),
                    }));
                if v >= 4 {
                    listed = listed.with_group_state(s(g.state_name()));
                }
                if v >= 5 {
                    listed = listed.with_group_type(s(g.type_name()));
                }
                listed
            })
            .collect();
        let mut response = ListGroupsResponse::default().with_groups(groups);
        if loading {
            response = response.with_error_code(code(ResponseError::CoordinatorLoadInProgress));
        }
        self.respond(ctx.token, GroupResponse::ListGroups(response));
    }

    pub(super) fn describe_groups(&mut self, ctx: &RequestContext, req: DescribeGroupsRequest) {
        let v = ctx.api_version;
        let described = req
            .groups
            .iter()
            .map(|gid| {
                let base = DescribedGroup::default().with_group_id(gid.clone());
                if let Err(e) = self.check_coordinator(gid) {
                    return base.with_error_code(code(e));
                }
                let Some(group) = self.durable_group(gid.as_str()) else {
                    let dead = base.with_group_state(s(GroupState::Dead.name()));
                    return if v >= 6 {
                        dead.with_error_code(code(ResponseError::GroupIdNotFound))
                            .with_error_message(Some(s(&format!(
                                "Group {} not found.",
                                gid.as_str()
                            ))))
                    } else {
                        dead
                    };
                };
                if group.consumer.is_some() {
                    // A KIP-848 group is described by ConsumerGroupDescribe; admin clients
                    // fall back to it on this error, as with Kafka.
                    let dead = base.with_group_state(s(GroupState::Dead.name()));
                    return if v >= 6 {
                        dead.with_error_code(code(ResponseError::GroupIdNotFound))
                            .with_error_message(Some(s(&format!(
                                "Group {} is not a classic group.",
                                gid.as_str()
                            ))))
                    } else {
                        dead
                    };
                }
                describe_group(group, v)
            })
            .collect();
        self.respond(
            ctx.token,
            GroupResponse::DescribeGroups(DescribeGroupsResponse::default().with_groups(described)),
        );
    }

    pub(super) fn delete_groups(&mut self, ctx: &RequestContext, req: DeleteGroupsRequest) {
        let mut results = Vec::new();
        for gid in &req.groups_names {
            // Kafka deletes groups with one write per partition; each answer describes its
            // partition's latest state and waits for it to be durable.
            let partition = self.shard_of(gid.as_str());
            self.touch(partition);
            let error = self.delete_group(gid.as_str());
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(gid.clone())
                    .with_error_code(error.map_or(0, code)),
            );
        }
        self.respond(
            ctx.token,
            GroupResponse::DeleteGroups(DeleteGroupsResponse::default().with_results(results)),
        );
    }

    pub(super) fn delete_group(&mut self, group_id: &str) -> Option<ResponseError> {
        if let Err(e) = self.check_coordinator(group_id) {
            return Some(e);
        }
        let Some(group) = self.group(group_id) else {
            return Some(ResponseError::GroupIdNotFound);
        };
        match group.state {
            GroupState::Dead => return Some(ResponseError::GroupIdNotFound),
            GroupState::Empty => {}
            _ => return Some(ResponseError::NonEmptyGroup),
        }
        if group
            .consumer
            .as_ref()
            .is_some_and(|c| !c.members.is_empty())
        {
            return Some(ResponseError::NonEmptyGroup);
        }
        let group = self.remove_group(group_id).expect("group exists");
        // Tombstones for the committed offsets and for those of open transactions (one per key).
        let pending = group.pending_txn_offsets.values().flat_map(|o| o.keys());
        let keys: std::collections::BTreeSet<&(String, i32)> =
            group.offsets.keys().chain(pending).collect();
        for (topic, tp) in keys {
            self.append(
                group.partition,
                records::encode_offset_commit_key(group_id, topic, *tp),
                None,
            );
        }
        if group.consumer.is_some() {
            // Kafka's order: the target assignment's epoch, the subscription metadata, then
            // the group epoch, whose tombstone ends the group at replay.
            self.end_consumer_group(group_id);
        } else {
            self.append(
                group.partition,
                records::encode_group_metadata_key(group_id),
                None,
            );
        }
        self.cancel_group_timers(group_id);
        None
    }
}
