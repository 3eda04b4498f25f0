//! What a conformance run reports: one record per failed check, never a panic.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// One check that failed: which, what the contract expected, and what the implementation did.
///
/// A wrong answer from the implementation under test is a value, not a panic, so that one run
/// reports every broken promise at once and a third party's test prints them all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{check}: expected {expected}; saw {seen}")]
pub struct ConformanceFailure {
    /// The check's name: its [`Check::name`], which is also the name of its function.
    pub check: &'static str,
    /// What the documented contract requires at the step that failed.
    pub expected: String,
    /// What the implementation (or, when the text says so, the harness) did instead.
    pub seen: String,
}

/// Every failed check of a run: what [`check_store`](super::check_store) and
/// [`check_backend`](super::check_backend) return when anything failed.
///
/// Displayed as one line per failure, after a count, so that a third party's
/// `check_store(&harness).await.unwrap()` prints the whole list in the test output.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConformanceFailures {
    /// How many checks ran (the failed ones included).
    pub checks_run: usize,
    /// The failed checks, in the order they ran; never empty.
    pub failures: Vec<ConformanceFailure>,
}

impl ConformanceFailures {
    /// The names of the failed checks, in the order they ran: what a test of a deliberately
    /// broken implementation compares with what it expects to be caught.
    pub fn failed_checks(&self) -> Vec<&'static str> {
        self.failures.iter().map(|f| f.check).collect()
    }
}

impl fmt::Display for ConformanceFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} conformance checks failed",
            self.failures.len(),
            self.checks_run
        )?;
        for failure in &self.failures {
            write!(f, "\n  - {failure}")?;
        }
        Ok(())
    }
}

/// What one check returns: `Ok` when the implementation kept every promise the check tests.
pub type Outcome = Result<(), ConformanceFailure>;

/// A check's future, boxed so that checks of one suite fit in one list.
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// One check of a suite, by name, so that a third party can list the checks and run one at a
/// time (the first failing one, say, while fixing it).
///
/// `H` is the suite's harness: a [`StoreHarness`](super::StoreHarness) or a
/// [`BackendHarness`](super::BackendHarness).
pub struct Check<H: ?Sized> {
    /// The check's name, which is also the name of its function in
    /// [`store`](super::store) or [`backend`](super::backend) and what a
    /// [`ConformanceFailure`] names.
    pub name: &'static str,
    /// The promise it checks, in one line.
    pub about: &'static str,
    /// The check itself.
    pub run: for<'a> fn(&'a H) -> CheckFuture<'a>,
}

impl<H: ?Sized> Check<H> {
    /// Runs the check against `harness`.
    pub async fn run(&self, harness: &H) -> Outcome {
        (self.run)(harness).await
    }
}

impl<H: ?Sized> Clone for Check<H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H: ?Sized> Copy for Check<H> {}

impl<H: ?Sized> fmt::Debug for Check<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("name", &self.name)
            .field("about", &self.about)
            .finish_non_exhaustive()
    }
}

/// Runs `checks` one after another (never concurrently: each check's steps assume nobody else
/// touches its nodes or volumes) and gathers their failures.
pub(crate) async fn run_all<H: ?Sized>(
    harness: &H,
    checks: &[Check<H>],
) -> Result<(), ConformanceFailures> {
    let mut failures = Vec::new();
    for check in checks {
        if let Err(failure) = check.run(harness).await {
            failures.push(failure);
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(ConformanceFailures {
            checks_run: checks.len(),
            failures,
        })
    }
}
