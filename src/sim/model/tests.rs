//! Proptest properties over the model checks: random histories of state operations and of
//! planner steps.

use std::time::Duration;

use super::*;
use crate::config::Config;
use proptest::prelude::*;

fn state_op() -> impl Strategy<Value = StateOp> {
    let id = 0u8..8;
    prop_oneof![
        id.clone().prop_map(StateOp::AddNode),
        id.clone().prop_map(StateOp::RemoveNode),
        (id.clone(), any::<bool>()).prop_map(|(v, m)| StateOp::SetVolume(v, m)),
        (
            id.clone(),
            id.clone(),
            proptest::collection::vec(0u8..8, 0..4)
        )
            .prop_map(|(w, n, vs)| StateOp::AddWorkload(w, n, vs)),
        id.clone().prop_map(StateOp::RemoveWorkload),
        (id.clone(), id.clone()).prop_map(|(v, n)| StateOp::Attached(v, n)),
        (id.clone(), id.clone()).prop_map(|(v, n)| StateOp::Uncertain(v, n)),
        (id.clone(), id.clone()).prop_map(|(v, n)| StateOp::Detached(v, n)),
        (id.clone(), id.clone(), any::<bool>()).prop_map(|(v, n, b)| StateOp::Withhold(v, n, b)),
        id.prop_map(StateOp::UnregisterVolume),
        any::<u8>().prop_map(StateOp::PollPending),
    ]
}

fn outcome() -> impl Strategy<Value = Answer> {
    prop_oneof![
        6 => Just(Answer::Ok),
        2 => Just(Answer::Transient),
        2 => Just(Answer::Uncertain),
        1 => Just(Answer::Conflict),
    ]
}

fn plan_step() -> impl Strategy<Value = PlanStep> {
    prop_oneof![
        3 => (0u8..8, 0u8..4, proptest::collection::vec(0u8..6, 0..3))
            .prop_map(|(w, n, vs)| PlanStep::Schedule(w, n, vs)),
        2 => (0u8..8).prop_map(PlanStep::Remove),
        1 => (0u8..4, proptest::bool::weighted(0.8), proptest::bool::weighted(0.1), any::<bool>())
            .prop_map(|(n, h, f, r)| PlanStep::Facts(n, h, f, r)),
        5 => (1u8..40).prop_map(PlanStep::Advance),
        6 => (any::<u8>(), outcome()).prop_map(|(k, o)| PlanStep::Finish(k, o)),
        1 => Just(PlanStep::Restart),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha, ..ProptestConfig::default() })]

    #[test]
    fn desired_and_actual_state_match_the_reference(ops in proptest::collection::vec(state_op(), 0..80)) {
        prop_assert_eq!(check_state_ops(&ops), Ok(()));
    }

    #[test]
    fn planner_keeps_i1_i2_c5_and_settles(steps in proptest::collection::vec(plan_step(), 0..200)) {
        prop_assert_eq!(check_planner(&steps, Config::default()), Ok(()));
    }

    /// Small backend load limits, a slow bucket, and calls overdue after one to three
    /// seconds: never more calls of a class running younger than that than its limit, nor
    /// more in all than the limit plus the overdue bound, and everything still settles (no
    /// queue stalls with free capacity).
    #[test]
    fn planner_under_backend_load_keeps_its_limits_and_settles(
        steps in proptest::collection::vec(plan_step(), 0..200),
        attaches in 1usize..3,
        detaches in 1usize..3,
        rate in proptest::option::of((1u64..20, 1u32..3)),
        overdue in proptest::option::of((1u64..4, 1usize..3)),
    ) {
        let config = Config {
            backend_load: crate::config::BackendLoad {
                max_attaches: Some(attaches),
                max_detaches: Some(detaches),
                rate: rate.map(|(every, burst)| crate::config::RateLimit {
                    every: Duration::from_millis(100 * every),
                    burst,
                }),
                overdue: overdue.map(|(after, max)| crate::config::OverdueCalls {
                    after: Duration::from_secs(after),
                    max,
                }),
            },
            ..Config::default()
        };
        prop_assert_eq!(check_planner(&steps, config), Ok(()));
    }
}

/// The planner property catches a planted bug: with C1, C2, C4 or C5 reverted, some history
/// breaks I1, C5, or leaves a workload stuck or an attachment leaked after settling.
/// Searching a fixed number of generated histories shows the property bites.
#[test]
fn planner_property_finds_planted_bugs() {
    use proptest::test_runner::{Config as PtConfig, RngAlgorithm, TestRng, TestRunner};
    for bugs in [
        crate::config::UpstreamBugs {
            c5_detach_before_status_ack: true,
            ..Default::default()
        },
        crate::config::UpstreamBugs {
            c2_ignore_uncertain_holder: true,
            ..Default::default()
        },
        crate::config::UpstreamBugs {
            c1_lose_report_on_failed_detach: true,
            ..Default::default()
        },
        crate::config::UpstreamBugs {
            c4_sticky_assumed_mount: true,
            ..Default::default()
        },
    ] {
        let config = Config {
            upstream_bugs: bugs,
            ..Config::default()
        };
        let mut runner = TestRunner::new_with_rng(
            PtConfig {
                cases: 2000,
                failure_persistence: None,
                ..PtConfig::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
        );
        let result = runner.run(&proptest::collection::vec(plan_step(), 0..200), |steps| {
            prop_assert_eq!(check_planner(&steps, config.clone()), Ok(()));
            Ok(())
        });
        assert!(result.is_err(), "planted {bugs:?} was not found");
    }
}
