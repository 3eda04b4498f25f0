//! Incident scenarios: a line-based script that replays an outage against the simulator.
//!
//! Incidents are reported as a story ("the detach failed, the pod came back to the same node, and
//! it never started"). Writing that story as a script lets the simulator replay it exactly, lets a
//! fuzzer print the schedules it finds in the same form, and keeps each upstream bug as a small
//! regression file. This module only parses: text in, typed [`Scenario`] out. It never panics,
//! whatever the input, and every error names its line.
//!
//! # Format
//!
//! One statement a line; `#` starts a comment that runs to the end of the line; blank lines are
//! ignored; tokens are separated by whitespace. A `<time>` is a duration since the start of the
//! scenario, written as a whole number and a unit: `150ms`, `2s`, `6m`, `1h` (a bare `0` is also
//! accepted). Names are any token without whitespace, commas, `#` or control characters, words
//! of the format included: `release unmount from a` releases a volume named `unmount`. The text
//! is UTF-8 ([`parse_bytes`] says on which line it is not); a byte-order mark at its start is
//! skipped. An error message shows the script's control characters escaped (`\0`).
//!
//! ```text
//! set <key> <value>        keys and defaults: reconcile-period 100ms, sync-period 60s,
//!                          max-wait-for-unmount 6m, force-detach-on-timeout off (on|off),
//!                          machine-fencing off (on|off: fencing without a human),
//!                          cache-lag 0ms, status-cache-lag 0ms, attach-latency 200ms,
//!                          detach-latency 200ms, status-latency 10ms, seed 0 (u64;
//!                          non-zero: backend and store latencies vary by ±50%,
//!                          reproducibly)
//! set verify-batch <n>     the periodic verify takes at most about n attachments a pass
//!                          (whole nodes), its round spread over the sync period (default
//!                          250: `Config::verify_batch`)
//! set volumes-per-pass <n> a reconcile pass looks at most at n marked volumes, more
//!                          taken over the next passes (default 250:
//!                          `Config::volumes_per_pass`)
//! set max-attaches <n>     backend load (off by default): at most n attach calls at once,
//! set max-detaches <n>     at most n detaches at once (from their fresh read to their call),
//! set backend-rate <every> <burst>
//!                          and a token bucket on both: one token every <every>, at most
//!                          <burst> tokens (see `Config::backend_load`)
//! set overdue-after <d>    a call still running after d is overdue and gives its slot
//! set max-overdue <n>      back, at most n such calls per class (default 1s and 16;
//!                          see `OverdueCalls`)
//! set upstream-bug <c1..c6|l1|l2> on|off
//!                          re-enable the reproduction of an upstream bug (l1: our
//!                          own late-attach leak of issue 9; l2: one shared queue and
//!                          limit for attaches and detaches, a single worker pool)
//! node <name> [attach-limit <k> [unreported]]
//!                          the machine holds at most k volumes: the backend refuses more
//!                          (node full); the node's facts report k unless `unreported`
//! volume <name> single-node|multi-node [claim-only]
//!                          claim-only: nodes reach it without an attach (NFS, local):
//!                          the controller never calls the backend for it, only grants it
//! at <time> pod <p> on <node> uses <v>[,<v>...]
//! at <time> delete pod <p>          graceful: the node agent unmounts, then the pod is gone
//! at <time> force-delete pod <p>    gone from the API at once; a live agent unmounts later
//! at <time> node <n> crash|recover  crash: agent stops, nothing unmounts, node unhealthy
//! at <time> node <n> fence|unfence  fence: out-of-service; its pods are force-deleted
//! at <time> node <n> delete|create  the node object is deleted (the machine runs on, its
//!                                   agent's reports reach nobody) / created again under the
//!                                   same name with a fresh, empty status (upstream 50721)
//! at <time> node <n> stop-reporting|resume-reporting
//!                                   the agent loses the API while its machine runs: it
//!                                   neither reports (the store keeps its last in-use list,
//!                                   stale) nor hears of changes; its pods run on, mounted
//! at <time> node <n> power-off|power-on
//!                                   the machine is powered off at the provider, no taint:
//!                                   nothing mounted, no agent (node unhealthy, its last
//!                                   in-use report stays); only the backend's machine state
//!                                   says Off / it boots again, clean
//! at <time> hang unmount <v> on <n> the agent cannot finish unmounting v (upstream 110721):
//!                                   v stays mounted and in use until released or fenced
//! at <time> release unmount <v> on <n>
//! at <time> partition backend <n>   attach, detach and verify calls about n hang until healed
//!                                   (the controller's call deadlines end its waits); other
//!                                   nodes' calls go on
//! at <time> heal backend <n>        the hung calls go on and take effect
//! at <time> fail attach|detach <v> on <n> [times <k>] [uncertain]
//!                                   uncertain: the call errors but the backend did it
//! at <time> fail status <n> [times <k>]
//! at <time> restart controller      in-flight calls are lost to it; it recovers from store
//!                                   and backend
//! at <time> expect pod <p> running|pending|gone
//! at <time> expect attached|detached <v> <n>
//! at <time> expect reported <n> <v>[,<v>...]|none      exact list in the store
//! at <time> expect event multi-attach <p>
//! at <time> expect no-event multi-attach <p>
//! at <time> release <v> from <n>  an operator releases a volume stuck on a node: refused
//!                                   unless the node is fenced
//! at <time> operator-detach <v> from <n>
//!                                   the volume is detached behind the controller's back (a
//!                                   cloud console): the backend no longer has it there
//! at <time> expect event node-full <p>     its volume waited for room on its node
//! at <time> expect calls attach|detach <v> <n> =|<=|>= <k>
//! at <time> expect writes <n> =|<=|>= <k>
//! at <time> expect wait <p>|<v> <wait> [<n>]   the controller's explanation (below)
//! run <time>                        how long to simulate in total (else the runner decides)
//! ```
//!
//! Every duration is at most 876000h (100 years, [`MAX_DURATION`]); a longer one, such as
//! `at 18446744073709551615s`, is refused with [`ParseErrorKind::DurationTooLong`], so that no
//! sum of a scenario's durations can overflow in the simulator, the driver or the core. A
//! scenario built in code gets the same check from [`Scenario::validate`], which the runner
//! applies before it simulates anything.
//!
//! `times <k>` defaults to 1 and must be at least 1. The parser also checks what needs no
//! simulation: settings come before the first `at` line and are set once; nodes and volumes are
//! declared once, before an `at` line uses them (pods need no declaration); `at` times never go
//! backwards; there is at most one `run`, and no step lies beyond it. The name `none` cannot name a
//! volume, since `expect reported <n> none` means the empty list.
//!
//! `expect wait` asks the running controller why a pod (or a declared volume: a volume's name
//! wins over a pod's) waits ([`ControllerHandle::explain_workload`](crate::controller::ControllerHandle::explain_workload)):
//! `<wait>` is one of `settled`, `recovery`, `call`, `backoff`, `backend-load`, `node-full`,
//! `backend-said-full`, `held-elsewhere`, `store-ack`, `status-write`, `unmount`, `held-back-by-read`, `fence`,
//! `node-deleted`, `fresh-read`, `release-verify`, `next-pass`, `unknown` (the kinds of
//! [`Wait`](crate::core::Wait)), or `missing` (the pod names a node or volume the controller
//! was not told of). It holds when one of the pairs that hold the pod back (its volumes on its
//! node, and their holders elsewhere; for a volume, any of its pairs) waits so, on `<n>` if
//! given (for `held-elsewhere`, `<n>` is a holder; for `call`, the call's node); `settled`
//! without a node holds when nothing waits, `recovery` without a node while the controller's
//! recovery listings are not in.
//!
//! # Example
//!
//! The first incident of the upstream fact sheet (kubernetes#49053, seed 000): a detach fails, the
//! pod returns to the same node, and the volume must be reported again so that the pod can start.
//!
//! ```
//! use std::time::Duration;
//! use attach_detach::sim::scenario::{parse, Action, Expectation, PodState};
//!
//! let scenario = parse(
//!     "
//! ## kubernetes#49053: detach fails, pod comes back to the same node
//! set max-wait-for-unmount 6m
//! node a
//! node b
//! volume data single-node
//!
//! at 0s   pod web-0 on a uses data
//! at 5s   expect pod web-0 running
//! at 6s   fail detach data on a times 3
//! at 6s   delete pod web-0
//! at 7s   pod web-1 on a uses data
//! at 30s  expect reported a data
//! at 30s  expect pod web-1 running
//! run 40s
//! ",
//! )?;
//! assert_eq!(scenario.nodes, ["a", "b"]);
//! assert_eq!(scenario.steps.len(), 7);
//! assert_eq!(scenario.steps[1].line, 9);
//! assert_eq!(
//!     scenario.steps[6].action,
//!     Action::Expect(Expectation::Pod { pod: "web-1".into(), state: PodState::Running }),
//! );
//! assert_eq!(scenario.run, Some(Duration::from_secs(40)));
//!
//! let err = parse("node a\nat 1s node b crash").unwrap_err();
//! assert_eq!(err.to_string(), "line 2: node `b` is not declared (add `node b` before using it)");
//! # Ok::<(), attach_detach::sim::scenario::ParseError>(())
//! ```

mod error;
mod keyword;
mod parser;
mod printer;
mod types;

#[cfg(test)]
mod tests;

pub(crate) use error::Escaped;
pub use error::{ParseError, ParseErrorKind, ScenarioError};
pub use parser::{parse, parse_bytes};
pub use printer::format_duration;
pub use types::{
    Action, AttachLimit, CallOp, Cmp, Expectation, ExpectedWait, MAX_DURATION, PodState,
    SIM_OVERDUE, Scenario, Settings, Step, UpstreamBug,
};
