//! The controller's decisions, as pure functions of the metadata image, the request and the
//! time: what records a change needs, or the Kafka error that refuses it. No I/O, no state of
//! their own; [`super::ControllerTask`] runs them against its image and commits what they return.

use crate::errors::ApiError;

/// ElectLeaders' election types (the request's `election_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    Preferred,
    Unclean,
}

/// The leader an ElectLeaders request makes (Kafka's `PartitionChangeBuilder`):
/// - PREFERRED: `replicas[0]` if it is in the ISR and eligible; ELECTION_NOT_NEEDED if it already
///   leads; else PREFERRED_LEADER_NOT_AVAILABLE.
/// - UNCLEAN: ELECTION_NOT_NEEDED while an eligible leader exists; else the first eligible ISR
///   member, else the first eligible replica (the unclean case); else
///   ELIGIBLE_LEADERS_NOT_AVAILABLE.
pub fn elect_leader(
    election: ElectionType,
    replicas: &[i32],
    isr: &[i32],
    current_leader: i32,
    eligible: impl Fn(i32) -> bool,
) -> Result<i32, ApiError> {
    match election {
        ElectionType::Preferred => {
            let preferred = *replicas
                .first()
                .ok_or(ApiError::PreferredLeaderNotAvailable)?;
            if preferred == current_leader {
                Err(ApiError::ElectionNotNeeded)
            } else if isr.contains(&preferred) && eligible(preferred) {
                Ok(preferred)
            } else {
                Err(ApiError::PreferredLeaderNotAvailable)
            }
        }
        ElectionType::Unclean => {
            if current_leader >= 0 && eligible(current_leader) {
                return Err(ApiError::ElectionNotNeeded);
            }
            isr.iter()
                .chain(replicas.iter())
                .copied()
                .find(|r| replicas.contains(r) && eligible(*r))
                .ok_or(ApiError::EligibleLeadersNotAvailable)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn election_table() {
        use ElectionType::*;
        let all = |_: i32| true;
        let not_2 = |r: i32| r != 2;
        // (type, replicas, isr, leader, eligible, expected)
        let cases: Vec<(
            ElectionType,
            Vec<i32>,
            Vec<i32>,
            i32,
            &dyn Fn(i32) -> bool,
            Result<i32, ApiError>,
        )> = vec![
            (
                Preferred,
                vec![1, 2, 3],
                vec![1, 2, 3],
                1,
                &all,
                Err(ApiError::ElectionNotNeeded),
            ),
            (Preferred, vec![1, 2, 3], vec![1, 2, 3], 2, &all, Ok(1)),
            (
                Preferred,
                vec![1, 2, 3],
                vec![2, 3],
                2,
                &all,
                Err(ApiError::PreferredLeaderNotAvailable),
            ),
            (
                Preferred,
                vec![2, 1],
                vec![1, 2],
                1,
                &not_2,
                Err(ApiError::PreferredLeaderNotAvailable),
            ),
            (
                Unclean,
                vec![1, 2],
                vec![1, 2],
                1,
                &all,
                Err(ApiError::ElectionNotNeeded),
            ),
            (Unclean, vec![1, 2, 3], vec![2], -1, &not_2, Ok(1)),
            (Unclean, vec![1, 2, 3], vec![3], -1, &all, Ok(3)),
            (
                Unclean,
                vec![2],
                vec![2],
                -1,
                &not_2,
                Err(ApiError::EligibleLeadersNotAvailable),
            ),
        ];
        for (election, replicas, isr, leader, eligible, expected) in cases {
            assert_eq!(
                elect_leader(election, &replicas, &isr, leader, eligible),
                expected,
                "{election:?} replicas={replicas:?} isr={isr:?} leader={leader}"
            );
        }
    }
}
