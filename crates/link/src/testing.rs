//! Support for test suites that need network namespaces (here and in other crates).

/// True when namespaces can be made (root). Otherwise prints `SKIP: <test>: <reason>` and
/// returns false — or panics when `WEBPEP_REQUIRE_NETNS=1` (CI), so that a skip can never pass
/// unnoticed there.
pub fn netns_available(test: &str) -> bool {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    skip_unless_required(
        test,
        "WEBPEP_REQUIRE_NETNS",
        "not root: network namespaces and TUN devices need CAP_NET_ADMIN",
    )
}

/// A test that cannot run here: panics when `var` is 1 (CI), else prints
/// `SKIP: <test>: <reason>`. Returns false (the test does not go on).
pub fn skip_unless_required(test: &str, var: &str, reason: &str) -> bool {
    if std::env::var(var).as_deref() == Ok("1") {
        panic!("{test}: {reason} ({var}=1)");
    }
    eprintln!("SKIP: {test}: {reason}");
    false
}
