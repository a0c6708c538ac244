//! Support for test suites that need network namespaces (here and in other crates).

/// True when namespaces can be made (root). Otherwise prints `SKIP: <test>: <reason>` and
/// returns false — or panics when `WEBPEP_REQUIRE_NETNS=1` (CI), so that a skip can never pass
/// unnoticed there.
pub fn netns_available(test: &str) -> bool {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let reason = "not root: network namespaces and TUN devices need CAP_NET_ADMIN";
    if std::env::var("WEBPEP_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("{test}: {reason} (WEBPEP_REQUIRE_NETNS=1)");
    }
    eprintln!("SKIP: {test}: {reason}");
    false
}
