//! Helpers shared by the integration tests.

use umt_rt::BackendKind;

/// The backend of the monitored runs: `UMT_TEST_BACKEND=kernel|perf|auto` (default auto), so
/// the same tests run against the UMT kernel inside the patched guest.
pub fn monitored_backend() -> BackendKind {
    std::env::var("UMT_TEST_BACKEND")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(BackendKind::Auto)
}
