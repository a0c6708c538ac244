#![no_main]
//! The browser side of an intercepted CONNECT (`webpep_intercept::accept_browser`): byte 0
//! says how many of the following bytes arrived with the CONNECT head (the "early" bytes),
//! the rest come over the stream, which then closes. Whatever the bytes (a ClientHello that
//! does not parse, an odd or foreign server name, no common ALPN), accepting never panics
//! and never completes a handshake for a name other than the CONNECT's host.

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use tokio::io::AsyncWriteExt;
use webpep_intercept::{accept_browser, CaStore, LeafCache};

fn leaves() -> &'static LeafCache {
    static LEAVES: OnceLock<LeafCache> = OnceLock::new();
    LEAVES.get_or_init(|| {
        let ca = CaStore::generate("webpep fuzz CA").expect("a CA");
        LeafCache::new(Arc::new(ca), 4)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = (split as usize).min(rest.len());
    let (early, later) = rest.split_at(at);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let later = later.to_vec();
        let browser = async move {
            let _ = theirs.write_all(&later).await;
            let _ = theirs.shutdown().await;
            // Keep our end readable until the acceptor is done with it.
            theirs
        };
        let (accepted, _theirs) = tokio::join!(
            accept_browser(ours, early.to_vec(), "www.fuzz.example", leaves()),
            browser
        );
        // Random bytes cannot finish a TLS handshake (the browser never reads our flight).
        assert!(accepted.is_err(), "a handshake completed from fuzz bytes");
    });
});
