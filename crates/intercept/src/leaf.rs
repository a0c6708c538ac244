//! Per-host leaf certificates, minted on first use and kept in a bounded LRU cache.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::ca::{CaError, CaStore};
use crate::host::{classify, Host};

/// The ALPN protocols an intercepting server offers, in preference order.
pub const ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

/// The ring provider, passed explicitly: webpep installs no process-wide default provider.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls server configuration presenting `issued`: TLS 1.2 and 1.3, ALPN h2 and http/1.1,
/// no client authentication.
pub fn server_config(issued: crate::IssuedCert) -> Result<Arc<rustls::ServerConfig>, CaError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(issued.chain, issued.key)?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// Mints a leaf certificate per host (one key each) and hands out server configurations for
/// them; the `capacity` most recently used are kept.
pub struct LeafCache {
    ca: Arc<CaStore>,
    capacity: usize,
    state: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    /// Host → its configuration and the tick it was last used at.
    entries: HashMap<String, (Arc<rustls::ServerConfig>, u64)>,
    /// Tick → host, oldest first.
    by_use: BTreeMap<u64, String>,
    tick: u64,
    minted: u64,
}

impl LeafCache {
    /// A cache of at most `capacity` hosts (at least one).
    pub fn new(ca: Arc<CaStore>, capacity: usize) -> Self {
        LeafCache {
            ca,
            capacity: capacity.max(1),
            state: Mutex::new(Lru::default()),
        }
    }

    /// The server configuration for `host`: a valid host name (any case, trailing dot
    /// ignored) or an IP literal; anything else is an error and mints nothing.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, CaError> {
        let key = match classify(host) {
            Some(Host::Name(name)) => name,
            Some(Host::Ip(ip)) => ip.to_string(),
            None => return Err(CaError::InvalidHost(host.to_string())),
        };
        // Minting (a key and a signature, well under a millisecond) happens under the lock, so
        // concurrent first requests for one host share one certificate and one key.
        let mut lru = self.state.lock().unwrap_or_else(|e| e.into_inner());
        lru.tick += 1;
        let tick = lru.tick;
        if let Some((config, used)) = lru.entries.get_mut(&key) {
            let config = config.clone();
            let previous = std::mem::replace(used, tick);
            lru.by_use.remove(&previous);
            lru.by_use.insert(tick, key);
            return Ok(config);
        }
        let config = server_config(self.ca.issue(std::slice::from_ref(&key))?)?;
        lru.minted += 1;
        while lru.entries.len() >= self.capacity {
            let Some((_, oldest)) = lru.by_use.pop_first() else {
                break;
            };
            lru.entries.remove(&oldest);
        }
        lru.entries.insert(key.clone(), (config.clone(), tick));
        lru.by_use.insert(tick, key);
        Ok(config)
    }

    /// How many leaf certificates were minted so far.
    pub fn minted(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).minted
    }

    /// How many hosts' configurations are cached.
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The CA the leaves are issued by.
    pub fn ca(&self) -> &Arc<CaStore> {
        &self.ca
    }
}
