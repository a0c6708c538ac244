//! Proxy authentication (DESIGN §9: "clients authenticate"): `Proxy-Authorization` /
//! `407 Proxy Authentication Required` / `Proxy-Authenticate` (RFC 9110 §11) with the Basic
//! scheme (RFC 7617), checked against a users file of salted PBKDF2-HMAC-SHA256 hashes in
//! PHC string format (`$pbkdf2-sha256$i=600000,l=32$<salt>$<hash>`).
//!
//! The units are pure and tested alone: [`PasswordHash`] (PHC parse, hash, constant-time
//! verify), [`parse_users`] (the users file), [`parse_basic`] (the header),
//! [`VerifiedCache`] and [`FailureThrottle`] (both take [`Instant`]s, never read the clock)
//! and [`need`] (which modes must authenticate). [`Authenticator`] is the thin shell that
//! locks, reads the clock and runs the slow hash off the async threads.
//!
//! Only explicit (absolute-form) and CONNECT requests can carry proxy credentials: a browser
//! that does not know it talks to a proxy (transparent, intercepted, URL-rewritten) never
//! sends them, so those are refused (the default, `transparent = "refuse"`) or, when the
//! operator chooses `transparent = "network"`, allowed by network.
//! `Proxy-Authorization` is hop-by-hop and is removed before a request goes on
//! ([`crate::http1::strip_hop_by_hop`]): credentials never reach an origin.
//!
//! Password guessing is slowed per client address (IPv6: its /64): after `max-failures`
//! wrong logins in a row, logins from there get 429 without a hash being computed until a
//! backoff (doubling per further failure, capped) has passed.

use std::collections::HashMap;
use std::io::BufRead;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD_NO_PAD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use http::header::{HeaderMap, HeaderValue, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, RETRY_AFTER};
use http::StatusCode;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Re-exported: the configuration checks them, authentication applies them.
pub use crate::config::{check_realm, MAX_FAILURE_BACKOFF};
use crate::config::{AuthConfig, TransparentAuth};
use crate::limits::{client_key, lock};
use crate::mode::Mode;
use crate::reply::Reply;

/// The PHC algorithm id of the hashes this proxy makes and reads.
pub const ALGORITHM: &str = "pbkdf2-sha256";
/// PBKDF2 iterations of new hashes: OWASP's 2023 figure for PBKDF2-HMAC-SHA256 (roughly a
/// fifth of a second of one core). Verified hashes keep the count they were made with.
pub const DEFAULT_ITERATIONS: u32 = 600_000;
/// Bytes of salt in new hashes.
pub const SALT_LEN: usize = 16;
/// Bytes of derived key in new hashes.
pub const HASH_LEN: usize = 32;
/// Hashes with fewer iterations are accepted but warned about at start.
const WEAK_ITERATIONS: u32 = 100_000;
/// A users file cannot make one check take minutes.
const MAX_ITERATIONS: u32 = 10_000_000;
/// How long a successful check is remembered.
pub const CACHE_TTL: Duration = Duration::from_secs(300);
/// How many successful checks are remembered at most.
pub const CACHE_CAPACITY: usize = 1024;
/// Failed logins are forgotten this long after the last one (or after the wait it started).
pub const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// How many client addresses' failures are remembered at most (under 100 bytes each).
pub const FAILURE_CAPACITY: usize = 100_000;

/// A salted PBKDF2-HMAC-SHA256 hash, parsed from its PHC string.
#[derive(Clone, PartialEq, Eq)]
pub struct PasswordHash {
    iterations: u32,
    salt: Vec<u8>,
    hash: Vec<u8>,
}

impl std::fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordHash")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl PasswordHash {
    /// Derives the hash of `password` with `salt` and `iterations`.
    pub fn derive(password: &[u8], salt: &[u8], iterations: u32) -> PasswordHash {
        let mut hash = vec![0u8; HASH_LEN];
        pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations.max(1), &mut hash);
        PasswordHash {
            iterations: iterations.max(1),
            salt: salt.to_vec(),
            hash,
        }
    }

    /// Parses `$pbkdf2-sha256$i=<iterations>[,l=<length>]$<salt>$<hash>` (salt and hash in
    /// the PHC format's base64: standard alphabet, no padding). The message says what is
    /// wrong without repeating the string.
    pub fn parse(s: &str) -> Result<PasswordHash, String> {
        let rest = s
            .strip_prefix('$')
            .ok_or("not a PHC string (must start with `$pbkdf2-sha256$`)")?;
        let parts: Vec<&str> = rest.split('$').collect();
        if parts[0] != ALGORITHM {
            return Err(format!(
                "not a `{ALGORITHM}` hash (the only algorithm supported; make one with `webpep server --hash-password`)"
            ));
        }
        if parts.len() != 4 {
            return Err(format!(
                "expected `${ALGORITHM}$i=<iterations>,l=<length>$<salt>$<hash>`"
            ));
        }
        let (mut iterations, mut length) = (None, None);
        for param in parts[1].split(',') {
            let (k, v) = param
                .split_once('=')
                .ok_or_else(|| format!("parameter without a value: {param:?}"))?;
            let slot = match k {
                "i" => &mut iterations,
                "l" => &mut length,
                _ => return Err(format!("unknown parameter {k:?} (expected i and l)")),
            };
            if slot.is_some() {
                return Err(format!("parameter {k:?} given twice"));
            }
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) || v.len() > 10 {
                return Err(format!("parameter {k:?} is not a number"));
            }
            *slot = Some(v.parse::<u64>().map_err(|e| format!("{k}: {e}"))?);
        }
        let iterations = iterations.ok_or("missing the iteration count `i=`")?;
        if !(1..=MAX_ITERATIONS as u64).contains(&iterations) {
            return Err(format!(
                "iteration count must be 1 to {MAX_ITERATIONS}, not {iterations}"
            ));
        }
        let salt = STANDARD_NO_PAD
            .decode(parts[2])
            .map_err(|e| format!("salt is not unpadded base64: {e}"))?;
        if !(8..=64).contains(&salt.len()) {
            return Err(format!(
                "salt must be 8 to 64 bytes, not {} (use a random salt of {SALT_LEN})",
                salt.len()
            ));
        }
        let hash = STANDARD_NO_PAD
            .decode(parts[3])
            .map_err(|e| format!("hash is not unpadded base64: {e}"))?;
        if !(16..=64).contains(&hash.len()) {
            return Err(format!("hash must be 16 to 64 bytes, not {}", hash.len()));
        }
        if length.is_some_and(|l| l != hash.len() as u64) {
            return Err(format!(
                "`l=` says {} bytes but the hash has {}",
                length.unwrap_or(0),
                hash.len()
            ));
        }
        Ok(PasswordHash {
            iterations: iterations as u32,
            salt,
            hash,
        })
    }

    /// The PHC string.
    pub fn to_phc(&self) -> String {
        format!(
            "${ALGORITHM}$i={},l={}${}${}",
            self.iterations,
            self.hash.len(),
            STANDARD_NO_PAD.encode(&self.salt),
            STANDARD_NO_PAD.encode(&self.hash)
        )
    }

    /// The iteration count.
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// True when `password` has this hash. Slow by design (the iteration count); the
    /// comparison takes the same time wherever the bytes differ.
    pub fn verify(&self, password: &[u8]) -> bool {
        let mut out = vec![0u8; self.hash.len()];
        pbkdf2::pbkdf2_hmac::<Sha256>(password, &self.salt, self.iterations, &mut out);
        out.ct_eq(&self.hash).into()
    }
}

/// The PHC string of `password` hashed with `salt` and [`DEFAULT_ITERATIONS`] (take the salt
/// from [`random_salt`]). This is what a users file line holds after `name:`.
pub fn hash_password(password: &str, salt: &[u8; SALT_LEN]) -> String {
    hash_password_with(password, salt, DEFAULT_ITERATIONS)
}

/// The same with a chosen iteration count (tests use a low one for speed).
pub fn hash_password_with(password: &str, salt: &[u8], iterations: u32) -> String {
    PasswordHash::derive(password.as_bytes(), salt, iterations).to_phc()
}

/// A salt from the operating system's random source.
pub fn random_salt() -> Result<[u8; SALT_LEN], String> {
    let mut salt = [0u8; SALT_LEN];
    getrandom::fill(&mut salt).map_err(|e| format!("no random numbers for a salt: {e}"))?;
    Ok(salt)
}

/// For `webpep server --hash-password [NAME]`: reads the password from the first line of
/// `input` (its line end removed; nothing else is trimmed, so spaces count), hashes it with a
/// random salt and [`DEFAULT_ITERATIONS`], and returns the line to print: `NAME:HASH` for a
/// users file when a name is given, else `HASH`. The password is read from input, not taken
/// as an argument, so it does not show in `ps` or the shell history.
pub fn hash_password_cli(name: Option<&str>, input: &mut dyn BufRead) -> Result<String, String> {
    if let Some(n) = name {
        check_user_name(n)?;
    }
    let mut line = String::new();
    input
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the password: {e}"))?;
    let password = line
        .strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(&line);
    if password.is_empty() {
        return Err("empty password (give it on standard input, one line)".into());
    }
    let hash = hash_password(password, &random_salt()?);
    Ok(match name {
        Some(n) => format!("{n}:{hash}"),
        None => hash,
    })
}

/// A user name as RFC 7617 allows it (no colon, no control characters), without spaces so
/// that a users file line reads unambiguously.
fn check_user_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty user name".into());
    }
    if name.contains(':') {
        return Err("a user name cannot contain ':'".into());
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("a user name cannot contain spaces or control characters".into());
    }
    Ok(())
}

/// The users of a users file.
#[derive(Debug, Clone)]
pub struct Users {
    by_name: HashMap<String, PasswordHash>,
    /// Checked for unknown names, so an unknown name costs the same time as a wrong password.
    dummy: PasswordHash,
}

impl Users {
    /// How many users.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True when there are none (a parsed file always has some).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// True when `user` exists and `password` is theirs. Slow: one hash whether or not the
    /// user exists.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        match self.by_name.get(user) {
            Some(h) => h.verify(password.as_bytes()),
            None => {
                let _ = self.dummy.verify(password.as_bytes());
                false
            }
        }
    }

    /// Names of users whose hash has fewer than 100,000 iterations.
    pub fn weak(&self) -> Vec<&str> {
        let mut w: Vec<&str> = self
            .by_name
            .iter()
            .filter(|(_, h)| h.iterations < WEAK_ITERATIONS)
            .map(|(n, _)| n.as_str())
            .collect();
        w.sort_unstable();
        w
    }
}

/// A line of a users file that cannot be used: (1-based line number, what is wrong).
pub type UsersLineError = (usize, String);

/// Parses a users file: `name:HASH` a line, `#` comments and blank lines allowed. The error
/// names the line (0 when the file as a whole is wrong) and never repeats the hash, which
/// may be a password written by mistake.
pub fn parse_users(text: &str) -> Result<Users, UsersLineError> {
    let mut by_name = HashMap::new();
    let mut line_of: HashMap<String, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, hash) = line
            .split_once(':')
            .ok_or((n, "expected `name:HASH`".to_string()))?;
        let name = name.trim();
        check_user_name(name).map_err(|m| (n, m))?;
        let hash = PasswordHash::parse(hash.trim())
            .map_err(|m| (n, format!("user {name:?}: bad password hash: {m}")))?;
        if let Some(first) = line_of.get(name) {
            return Err((n, format!("user {name:?} already defined on line {first}")));
        }
        line_of.insert(name.to_string(), n);
        by_name.insert(name.to_string(), hash);
    }
    let iterations = by_name.values().map(|h| h.iterations).max().ok_or((
        0,
        "no users (add `name:HASH` lines; make a hash with `webpep server --hash-password`)"
            .to_string(),
    ))?;
    let dummy = PasswordHash {
        iterations,
        salt: b"webpep-no-such-user".to_vec(),
        hash: vec![0; HASH_LEN],
    };
    Ok(Users { by_name, dummy })
}

/// A users file that cannot be used; the message names the file and the line.
#[derive(Debug, thiserror::Error)]
#[error("{path}{}: {message}", if *.line > 0 { format!(": line {}", .line) } else { String::new() })]
pub struct UsersFileError {
    /// The file.
    pub path: String,
    /// The 1-based line, 0 when the file as a whole is wrong.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Reads and parses a users file.
pub fn load_users(path: &Path) -> Result<Users, UsersFileError> {
    let err = |line: usize, message: String| UsersFileError {
        path: path.display().to_string(),
        line,
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(0, format!("cannot read: {e}")))?;
    parse_users(&text).map_err(|(line, m)| err(line, m))
}

/// Why a request was not let through (also the `reason` label of the metric).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Proxy-Authorization` (every browser's first request: it asks after the 407).
    Missing,
    /// A scheme other than Basic.
    Scheme,
    /// Basic, but not decodable as `user:password`; the reason.
    Malformed(&'static str),
    /// Unknown user or wrong password (deliberately not told apart).
    Invalid,
    /// A transparent/intercepted/URL-rewritten request with `transparent = "refuse"`.
    Transparent,
    /// Credentials from an address that failed too often lately, not checked; how long it
    /// must still wait.
    Throttled(Duration),
}

impl AuthFailure {
    /// Every label, in metric order.
    pub const LABELS: [&'static str; 6] = [
        "missing",
        "scheme",
        "malformed",
        "invalid",
        "transparent",
        "throttled",
    ];

    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing",
            AuthFailure::Scheme => "scheme",
            AuthFailure::Malformed(_) => "malformed",
            AuthFailure::Invalid => "invalid",
            AuthFailure::Transparent => "transparent",
            AuthFailure::Throttled(_) => "throttled",
        }
    }

    /// The reason given to the client.
    pub fn message(&self) -> String {
        match self {
            AuthFailure::Missing => {
                "this proxy requires authentication: no Proxy-Authorization credentials".into()
            }
            AuthFailure::Scheme => "Proxy-Authorization must use the Basic scheme".into(),
            AuthFailure::Malformed(why) => format!("malformed Proxy-Authorization: {why}"),
            AuthFailure::Invalid => "unknown user or wrong password".into(),
            AuthFailure::Transparent => "this proxy requires authentication, which transparent requests cannot carry: configure the browser to use the proxy explicitly".into(),
            AuthFailure::Throttled(wait) => format!(
                "too many failed logins from this address: retry after {} s",
                retry_after_secs(*wait)
            ),
        }
    }
}

/// Decoded Basic credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user-id.
    pub user: String,
    /// The password (may contain colons).
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// Base64 as RFC 7617 uses it; padding is not insisted on (some clients drop it).
const BASIC_B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Parses a `Proxy-Authorization` field value: `Basic <base64(user:password)>` (scheme case
/// insensitive; the password is everything after the first colon).
pub fn parse_basic(value: &[u8]) -> Result<Credentials, AuthFailure> {
    let v = value.trim_ascii();
    let (scheme, token) = match v.iter().position(|b| *b == b' ' || *b == b'\t') {
        Some(i) => (&v[..i], v[i..].trim_ascii()),
        None => (v, &b""[..]),
    };
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return Err(AuthFailure::Scheme);
    }
    if token.is_empty() {
        return Err(AuthFailure::Malformed("no credentials after Basic"));
    }
    let raw = BASIC_B64
        .decode(token)
        .map_err(|_| AuthFailure::Malformed("credentials are not base64"))?;
    let text =
        String::from_utf8(raw).map_err(|_| AuthFailure::Malformed("credentials are not UTF-8"))?;
    let (user, password) = text
        .split_once(':')
        .ok_or(AuthFailure::Malformed("no colon between user and password"))?;
    Ok(Credentials {
        user: user.to_string(),
        password: password.to_string(),
    })
}

/// The credentials of a request's `Proxy-Authorization` field.
pub fn credentials(headers: &HeaderMap) -> Result<Credentials, AuthFailure> {
    let mut values = headers.get_all(PROXY_AUTHORIZATION).iter();
    let v = values.next().ok_or(AuthFailure::Missing)?;
    if values.next().is_some() {
        return Err(AuthFailure::Malformed("more than one Proxy-Authorization"));
    }
    parse_basic(v.as_bytes())
}

/// What a request of some mode needs while authentication is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Nothing more than the client network check.
    Nothing,
    /// Valid credentials.
    Credentials,
    /// Refused (403): it cannot carry credentials and `transparent = "refuse"`.
    Refuse,
}

/// Which requests must authenticate: explicit and CONNECT always; transparent and URL-mode
/// ones cannot (the browser does not know it talks to a proxy), so `transparent` decides;
/// the proxy's own paths (404) need nothing.
pub fn need(mode: &Mode, transparent: TransparentAuth) -> Need {
    match mode {
        Mode::Explicit { .. } | Mode::Connect { .. } => Need::Credentials,
        Mode::Transparent { .. } | Mode::UrlPath { .. } => match transparent {
            TransparentAuth::Network => Need::Nothing,
            TransparentAuth::Refuse => Need::Refuse,
        },
        Mode::Local { .. } => Need::Nothing,
    }
}

/// Credentials verified lately, keyed by a keyed SHA-256 of what was presented, so that a
/// page of 60 objects costs one slow hash rather than 60 (each is a fifth of a second of
/// CPU at the default work factor). Bounded: at most `capacity` entries, each for `ttl`.
/// Only successes are remembered.
#[derive(Debug)]
pub struct VerifiedCache {
    map: HashMap<[u8; 32], (Arc<str>, Instant)>,
    ttl: Duration,
    capacity: usize,
}

impl VerifiedCache {
    /// An empty cache.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        VerifiedCache {
            map: HashMap::new(),
            ttl,
            capacity: capacity.max(1),
        }
    }

    /// The user verified under `key`, if still fresh at `now`.
    pub fn get(&mut self, key: &[u8; 32], now: Instant) -> Option<Arc<str>> {
        match self.map.get(key) {
            Some((user, expires)) if now < *expires => Some(user.clone()),
            Some(_) => {
                self.map.remove(key);
                None
            }
            None => None,
        }
    }

    /// Remembers that `key` verified as `user` at `now`. When full, expired entries go first,
    /// then the one closest to expiry.
    pub fn insert(&mut self, key: [u8; 32], user: Arc<str>, now: Instant) {
        if self.map.len() >= self.capacity && !self.map.contains_key(&key) {
            self.map.retain(|_, (_, expires)| now < *expires);
            if self.map.len() >= self.capacity {
                if let Some(oldest) = self
                    .map
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| *k)
                {
                    self.map.remove(&oldest);
                }
            }
        }
        self.map.insert(key, (user, now + self.ttl));
    }

    /// Entries now (expired ones included until touched).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Whole seconds to wait for `wait`, rounded up, at least 1 (for `Retry-After`).
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// How [`FailureThrottle`] slows password guessing from one client address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrottlePolicy {
    /// Failed logins in a row tolerated before the address must wait (0: never).
    pub max_failures: u32,
    /// The wait after the `max_failures`-th failure; each further one doubles it.
    pub backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
    /// Failures are forgotten this long after the last one (or after the wait it started).
    pub window: Duration,
}

impl ThrottlePolicy {
    /// The policy of `[auth]`.
    pub fn from_config(cfg: &AuthConfig) -> ThrottlePolicy {
        ThrottlePolicy {
            max_failures: cfg.max_failures,
            backoff: cfg.failure_backoff.0,
            max_backoff: cfg.max_failure_backoff.0.max(cfg.failure_backoff.0),
            window: FAILURE_WINDOW,
        }
    }

    /// The wait after the `failures`-th failure in a row; None below `max_failures`.
    pub fn wait_after(&self, failures: u32) -> Option<Duration> {
        if self.max_failures == 0 || failures < self.max_failures {
            return None;
        }
        let doublings = (failures - self.max_failures).min(31);
        Some(
            self.backoff
                .saturating_mul(1 << doublings)
                .min(self.max_backoff),
        )
    }
}

impl Default for ThrottlePolicy {
    fn default() -> Self {
        ThrottlePolicy::from_config(&AuthConfig::default())
    }
}

/// Recent failed logins of one client address.
#[derive(Clone, Copy, Debug)]
struct Failures {
    /// In a row (since the last success or the last time they were forgotten).
    count: u32,
    /// The latest.
    last: Instant,
    /// The end of the address's wait (not after `last` when it has none).
    until: Instant,
}

impl Failures {
    fn forgotten(&self, now: Instant, window: Duration) -> bool {
        now >= self.last.max(self.until) + window
    }
}

/// Failed logins per client address (IPv6: per /64, [`client_key`]), so that an address that
/// keeps failing must wait before its next login is even checked: [`ThrottlePolicy`]'s
/// backoff after `max_failures` in a row, doubling per further failure up to `max_backoff`;
/// a success forgets them. Takes [`Instant`]s, never reads the clock. Bounded: at most
/// `capacity` addresses; forgotten entries are pruned as the map grows, and when it is full
/// of recent ones the address whose last failure is oldest goes.
#[derive(Debug)]
pub struct FailureThrottle {
    map: HashMap<IpAddr, Failures>,
    policy: ThrottlePolicy,
    capacity: usize,
    /// The size at which forgotten entries are next pruned (doubles, so pruning is cheap
    /// on average).
    prune_at: usize,
}

/// The smallest map that is pruned.
const PRUNE_MIN: usize = 1024;

impl FailureThrottle {
    /// An empty throttle.
    pub fn new(policy: ThrottlePolicy, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        FailureThrottle {
            map: HashMap::new(),
            policy,
            capacity,
            prune_at: PRUNE_MIN.min(capacity),
        }
    }

    /// `Err(wait)` while logins from `client` must wait at `now`.
    pub fn check(&mut self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let key = client_key(client);
        let Some(f) = self.map.get(&key) else {
            return Ok(());
        };
        if now < f.until {
            return Err(f.until - now);
        }
        if f.forgotten(now, self.policy.window) {
            self.map.remove(&key);
        }
        Ok(())
    }

    /// Notes a failed login from `client` at `now`; the wait it starts, if any.
    pub fn failed(&mut self, client: IpAddr, now: Instant) -> Option<Duration> {
        if self.policy.max_failures == 0 {
            return None;
        }
        let key = client_key(client);
        if !self.map.contains_key(&key) {
            self.make_room(now);
        }
        let fresh = Failures {
            count: 0,
            last: now,
            until: now,
        };
        let window = self.policy.window;
        let f = self.map.entry(key).or_insert(fresh);
        if f.forgotten(now, window) {
            *f = fresh;
        }
        f.count = f.count.saturating_add(1);
        f.last = now;
        let wait = self.policy.wait_after(f.count)?;
        // Logins checked before the wait began may still fail during it: never shorten it.
        f.until = f.until.max(now.checked_add(wait).unwrap_or(now));
        Some(wait)
    }

    /// A successful login from `client`: its failures are forgotten.
    pub fn succeeded(&mut self, client: IpAddr) {
        if !self.map.is_empty() {
            self.map.remove(&client_key(client));
        }
    }

    /// Addresses remembered now (forgotten ones included until pruned).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Makes room for one more address.
    fn make_room(&mut self, now: Instant) {
        if self.map.len() < self.prune_at {
            return;
        }
        let window = self.policy.window;
        self.map.retain(|_, f| !f.forgotten(now, window));
        if self.map.len() >= self.capacity {
            if let Some(oldest) = self.map.iter().min_by_key(|(_, f)| f.last).map(|(k, _)| *k) {
                self.map.remove(&oldest);
            }
        }
        self.prune_at = (self.map.len() * 2).max(PRUNE_MIN).min(self.capacity);
    }
}

/// The proxy's authentication: users, policy, the cache of successes, the throttle of
/// failures and a bound on slow hashes running at once.
#[derive(Debug)]
pub struct Authenticator {
    users: Arc<Users>,
    transparent: TransparentAuth,
    challenge: HeaderValue,
    /// Keys the cache's SHA-256 so that the cache holds nothing a dictionary attack on a
    /// memory dump could use cheaply.
    secret: [u8; 32],
    cache: Mutex<VerifiedCache>,
    throttle: Mutex<FailureThrottle>,
    /// Slow hashes at once: half the cores, so that wrong guesses cannot take all the CPU
    /// (waiting callers find the cache filled by the one before them).
    slow: tokio::sync::Semaphore,
}

impl Authenticator {
    /// Reads `[auth]`'s users file; None when authentication is off.
    pub fn from_config(cfg: &AuthConfig) -> Result<Option<Authenticator>, UsersFileError> {
        let Some(path) = &cfg.users_file else {
            return Ok(None);
        };
        let users = load_users(path)?;
        let weak = users.weak();
        if !weak.is_empty() {
            tracing::warn!(file = %path.display(), users = ?weak, "password hashes with fewer than {WEAK_ITERATIONS} iterations; make new ones with `webpep server --hash-password`");
        }
        warn_if_world_readable(path);
        let transparent = match cfg.transparent {
            TransparentAuth::Refuse => {
                "refuse (transparent, intercepted, URL-rewritten requests get 403, relayed TLS an alert)"
            }
            TransparentAuth::Network => {
                "network (transparent, intercepted, URL-rewritten requests and relayed TLS need no credentials)"
            }
        };
        let policy = ThrottlePolicy::from_config(cfg);
        if policy.max_failures == 0 {
            tracing::warn!("auth.max-failures = 0: password guessing is not throttled");
        }
        tracing::info!(file = %path.display(), users = users.len(), transparent, max_failures = policy.max_failures, failure_backoff = ?policy.backoff, max_failure_backoff = ?policy.max_backoff, "proxy authentication on");
        Ok(Some(
            Authenticator::new(users, &cfg.realm, cfg.transparent).with_throttle(policy),
        ))
    }

    /// An authenticator for `users` (`realm` checked by [`check_realm`]).
    pub fn new(users: Users, realm: &str, transparent: TransparentAuth) -> Authenticator {
        let mut secret = [0u8; 32];
        if let Err(e) = getrandom::fill(&mut secret) {
            tracing::warn!(error = %e, "no random key for the credentials cache");
        }
        let challenge =
            HeaderValue::from_str(&format!("Basic realm=\"{realm}\", charset=\"UTF-8\""))
                .unwrap_or_else(|_| {
                    HeaderValue::from_static("Basic realm=\"webpep\", charset=\"UTF-8\"")
                });
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Authenticator {
            users: Arc::new(users),
            transparent,
            challenge,
            secret,
            cache: Mutex::new(VerifiedCache::new(CACHE_TTL, CACHE_CAPACITY)),
            throttle: Mutex::new(FailureThrottle::new(
                ThrottlePolicy::default(),
                FAILURE_CAPACITY,
            )),
            slow: tokio::sync::Semaphore::new((cores / 2).max(1)),
        }
    }

    /// The same with another throttle of failed logins (the default is `[auth]`'s).
    pub fn with_throttle(self, policy: ThrottlePolicy) -> Authenticator {
        Authenticator {
            throttle: Mutex::new(FailureThrottle::new(policy, FAILURE_CAPACITY)),
            ..self
        }
    }

    /// What a request of `mode` needs.
    pub fn need(&self, mode: &Mode) -> Need {
        need(mode, self.transparent)
    }

    /// Whether traffic that cannot carry credentials (transparent requests, relayed TLS) is
    /// refused rather than admitted on the client networks.
    pub fn refuses_transparent(&self) -> bool {
        matches!(self.transparent, TransparentAuth::Refuse)
    }

    fn key(&self, c: &Credentials) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.secret);
        h.update(c.user.as_bytes());
        h.update(b":");
        h.update(c.password.as_bytes());
        h.finalize().into()
    }

    fn cached(&self, key: &[u8; 32], client: IpAddr) -> Option<Arc<str>> {
        let user = lock(&self.cache).get(key, Instant::now())?;
        lock(&self.throttle).succeeded(client);
        Some(user)
    }

    fn throttled(&self, client: IpAddr) -> Result<(), AuthFailure> {
        lock(&self.throttle)
            .check(client, Instant::now())
            .map_err(AuthFailure::Throttled)
    }

    /// Checks a request's `Proxy-Authorization` from `client`; the user on success. A slow
    /// hash runs on a blocking thread only when these credentials were not verified lately
    /// and `client`'s address is not waiting after failed logins.
    pub async fn check(
        &self,
        headers: &HeaderMap,
        client: IpAddr,
        verifications: &AtomicU64,
    ) -> Result<Arc<str>, AuthFailure> {
        let creds = credentials(headers)?;
        // Before the cache too: otherwise a waiting guesser would still learn, for free, whether
        // a guess is a password someone used lately.
        self.throttled(client)?;
        let key = self.key(&creds);
        if let Some(user) = self.cached(&key, client) {
            return Ok(user);
        }
        let _permit = self
            .slow
            .acquire()
            .await
            .map_err(|_| AuthFailure::Invalid)?;
        // Guesses queued for the permit while their address's failures reached the limit.
        self.throttled(client)?;
        // Another request with the same credentials may have verified them meanwhile.
        if let Some(user) = self.cached(&key, client) {
            return Ok(user);
        }
        verifications.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let users = self.users.clone();
        let user = creds.user.clone();
        let ok = tokio::task::spawn_blocking(move || users.verify(&creds.user, &creds.password))
            .await
            .unwrap_or(false);
        if !ok {
            if let Some(wait) = lock(&self.throttle).failed(client, Instant::now()) {
                tracing::warn!(client = %client_key(client), ?wait, "repeated failed proxy logins: this address waits before its next login is checked");
            }
            return Err(AuthFailure::Invalid);
        }
        let user: Arc<str> = Arc::from(user);
        lock(&self.cache).insert(key, user.clone(), Instant::now());
        lock(&self.throttle).succeeded(client);
        Ok(user)
    }

    /// The answer to a request refused for `failure`: 403 for a refused transparent request,
    /// 429 with `Retry-After` for a throttled address (no challenge: a browser would only ask
    /// for the password again), else 407 with the challenge. Closed after CONNECT (the client
    /// may already be sending tunnel bytes), kept open otherwise (a browser retries on the
    /// same connection).
    pub fn refusal(&self, failure: &AuthFailure, connect: bool) -> Reply {
        let mut r = match failure {
            AuthFailure::Transparent => Reply::text(StatusCode::FORBIDDEN, &failure.message()),
            AuthFailure::Throttled(wait) => {
                let mut r = Reply::text(StatusCode::TOO_MANY_REQUESTS, &failure.message());
                r.headers
                    .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs(*wait)));
                r
            }
            _ => {
                let mut r = Reply::text(
                    StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                    &failure.message(),
                );
                r.headers.insert(PROXY_AUTHENTICATE, self.challenge.clone());
                r
            }
        };
        r.close = connect;
        r
    }
}

/// A users file others can read gives them hashes to attack offline.
fn warn_if_world_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path) {
        if m.permissions().mode() & 0o004 != 0 {
            tracing::warn!(file = %path.display(), "users file is readable by everyone; chmod o-r it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    /// Fast hashes for tests; the default's cost is tested once.
    const FAST: u32 = 1000;
    /// A client address.
    const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn hash_round_trip_and_wrong_password() {
        let s = hash_password_with("s3cret: pass", b"0123456789abcdef", FAST);
        assert!(s.starts_with("$pbkdf2-sha256$i=1000,l=32$"), "{s}");
        let h = PasswordHash::parse(&s).unwrap();
        assert_eq!(h.to_phc(), s);
        assert_eq!(h.iterations(), FAST);
        assert!(h.verify(b"s3cret: pass"));
        assert!(!h.verify(b"s3cret: pasS"));
        assert!(!h.verify(b""));
        // Another salt, another hash.
        assert_ne!(
            s,
            hash_password_with("s3cret: pass", b"0123456789abcdeF", FAST)
        );
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        ignore = "600,000 rounds take ~10 s unoptimized; runs under --release"
    )]
    fn default_hash_has_the_serious_work_factor() {
        let salt = random_salt().unwrap();
        assert_ne!(salt, random_salt().unwrap());
        let s = hash_password("pw", &salt);
        assert!(s.starts_with("$pbkdf2-sha256$i=600000,l=32$"), "{s}");
        assert!(PasswordHash::parse(&s).unwrap().verify(b"pw"));
        // The CLI helper: one line of input, a users-file line out.
        let line = hash_password_cli(Some("alice"), &mut &b"p w:x\r\nnext line\n"[..]).unwrap();
        assert!(line.starts_with("alice:$pbkdf2-sha256$i=600000,"), "{line}");
        let users = parse_users(&line).unwrap();
        assert!(users.verify("alice", "p w:x"));
        let bare = hash_password_cli(None, &mut &b"pw"[..]).unwrap();
        assert!(PasswordHash::parse(&bare).unwrap().verify(b"pw"));
    }

    #[test]
    fn hash_password_cli_refuses_bad_input() {
        for (name, input, needle) in [
            (Some("al:ice"), "pw\n", "':'"),
            (Some("al ice"), "pw\n", "spaces"),
            (Some(""), "pw\n", "empty user name"),
            (None, "\n", "empty password"),
            (None, "", "empty password"),
        ] {
            let e = hash_password_cli(name, &mut input.as_bytes()).unwrap_err();
            assert!(e.contains(needle), "{name:?} {input:?}: {e}");
        }
    }

    /// RFC 6070-style check of the primitive against an independently published vector
    /// (PBKDF2-HMAC-SHA256, "password"/"salt", 4096 iterations, 32 bytes).
    #[test]
    fn pbkdf2_sha256_known_vector() {
        let h = PasswordHash::derive(b"password", b"salt", 4096);
        let hex: String = h.hash.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a"
        );
    }

    #[test]
    fn phc_parse_rejects_malformed_strings() {
        let good = hash_password_with("pw", b"0123456789abcdef", FAST);
        let parts: Vec<&str> = good.split('$').collect();
        let (salt, hash) = (parts[3], parts[4]);
        let bad = [
            String::new(),
            "pw".into(),
            "pbkdf2-sha256$i=1000$x$y".into(),
            format!("$argon2id$v=19$m=19456,t=2,p=1${salt}${hash}"),
            format!("$pbkdf2-sha512$i=1000${salt}${hash}"),
            format!("$pbkdf2-sha256$i=1000${salt}"),
            format!("$pbkdf2-sha256$i=1000${salt}${hash}$"),
            format!("$pbkdf2-sha256${salt}${hash}"),
            format!("$pbkdf2-sha256$l=32${salt}${hash}"),
            format!("$pbkdf2-sha256$i=0${salt}${hash}"),
            format!("$pbkdf2-sha256$i=-5${salt}${hash}"),
            format!("$pbkdf2-sha256$i=+5${salt}${hash}"),
            format!("$pbkdf2-sha256$i=99999999999${salt}${hash}"),
            format!("$pbkdf2-sha256$i=1000,i=1000${salt}${hash}"),
            format!("$pbkdf2-sha256$i=1000,x=1${salt}${hash}"),
            format!("$pbkdf2-sha256$i${salt}${hash}"),
            format!("$pbkdf2-sha256$i=1000,l=16${salt}${hash}"),
            format!("$pbkdf2-sha256$i=1000${salt}=${hash}"),
            format!("$pbkdf2-sha256$i=1000$!!!${hash}"),
            format!("$pbkdf2-sha256$i=1000$c2FsdA${hash}"),
            format!("$pbkdf2-sha256$i=1000${salt}$c2hvcnQ"),
        ];
        for b in &bad {
            assert!(PasswordHash::parse(b).is_err(), "accepted {b:?}");
        }
        // `l` may be left out, and the order of i and l does not matter.
        assert!(PasswordHash::parse(&format!("$pbkdf2-sha256$i=1000${salt}${hash}")).is_ok());
        assert!(PasswordHash::parse(&format!("$pbkdf2-sha256$l=32,i=1000${salt}${hash}")).is_ok());
    }

    #[test]
    fn users_file_parses_and_errors_name_the_line() {
        let a = hash_password_with("apw", b"saltsaltsaltsalt", FAST);
        let b = hash_password_with("b:pw", b"saltsaltsaltsal2", 2 * FAST);
        let text = format!("# users\n\nalice:{a}\r\n  bob : {b}  \n");
        let u = parse_users(&text).unwrap();
        assert_eq!(u.len(), 2);
        assert!(u.verify("alice", "apw"));
        assert!(u.verify("bob", "b:pw"));
        assert!(!u.verify("alice", "b:pw"));
        assert!(!u.verify("carol", "apw"));
        assert_eq!(u.weak(), vec!["alice", "bob"]);
        assert_eq!(u.dummy.iterations, 2 * FAST);

        for (text, line, needle) in [
            (format!("alice:{a}\nbob\n"), 2, "name:HASH"),
            ("# c\n\nalice:secret\n".to_string(), 3, "bad password hash"),
            (
                format!("alice:{a}\nalice:{a}\n"),
                2,
                "already defined on line 1",
            ),
            (format!(":{a}\n"), 1, "empty user name"),
            (format!("al ice:{a}\n"), 1, "spaces"),
            ("# nobody\n\n".to_string(), 0, "no users"),
        ] {
            let (l, m) = parse_users(&text).unwrap_err();
            assert_eq!(l, line, "{text:?}: {m}");
            assert!(m.contains(needle), "{text:?}: {m}");
            assert!(!m.contains("secret"), "the hash field is not repeated: {m}");
        }
    }

    #[test]
    fn users_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let e = load_users(&missing).unwrap_err().to_string();
        assert!(e.contains("nope") && e.contains("cannot read"), "{e}");
        let f = dir.path().join("users");
        std::fs::write(&f, "# x\nalice:plain\n").unwrap();
        let e = load_users(&f).unwrap_err().to_string();
        assert!(
            e.contains(&*f.display().to_string()) && e.contains("line 2"),
            "{e}"
        );
    }

    #[test]
    fn basic_header_parser() {
        let ok = |v: &str| parse_basic(v.as_bytes());
        assert_eq!(
            ok(&format!("Basic {}", b64("alice:pw"))).unwrap(),
            Credentials {
                user: "alice".into(),
                password: "pw".into()
            }
        );
        // Scheme case-insensitive, extra spaces, padding optional.
        let c = ok(&format!("  bAsIc \t {}  ", b64("alice:a:b::c"))).unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("alice", "a:b::c"));
        let unpadded = b64("al:p").trim_end_matches('=').to_string();
        assert_eq!(ok(&format!("Basic {unpadded}")).unwrap().password, "p");
        // Empty password and UTF-8.
        assert_eq!(ok(&format!("Basic {}", b64("bob:"))).unwrap().password, "");
        assert_eq!(
            ok(&format!("Basic {}", b64("zoë:pässword"))).unwrap().user,
            "zoë"
        );

        assert_eq!(ok("Bearer abc"), Err(AuthFailure::Scheme));
        assert_eq!(ok("Digest username=\"a\""), Err(AuthFailure::Scheme));
        assert_eq!(ok(""), Err(AuthFailure::Scheme));
        assert!(matches!(ok("Basic"), Err(AuthFailure::Malformed(_))));
        assert!(matches!(ok("Basic   "), Err(AuthFailure::Malformed(_))));
        assert!(
            matches!(ok("Basic !!!notbase64"), Err(AuthFailure::Malformed(m)) if m.contains("base64"))
        );
        assert!(
            matches!(ok(&format!("Basic {}", b64("nocolon"))), Err(AuthFailure::Malformed(m)) if m.contains("colon"))
        );
        let latin1 = base64::engine::general_purpose::STANDARD.encode(b"z\xf6e:pw");
        assert!(
            matches!(ok(&format!("Basic {latin1}")), Err(AuthFailure::Malformed(m)) if m.contains("UTF-8"))
        );

        let mut h = HeaderMap::new();
        assert_eq!(credentials(&h), Err(AuthFailure::Missing));
        h.append(
            PROXY_AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {}", b64("a:b"))).unwrap(),
        );
        assert_eq!(credentials(&h).unwrap().user, "a");
        h.append(PROXY_AUTHORIZATION, HeaderValue::from_static("Basic eDp5"));
        assert!(matches!(credentials(&h), Err(AuthFailure::Malformed(_))));
    }

    #[test]
    fn credentials_debug_hides_the_password() {
        let c = parse_basic(format!("Basic {}", b64("alice:hunter2")).as_bytes()).unwrap();
        let d = format!("{c:?}");
        assert!(d.contains("alice") && !d.contains("hunter2"), "{d}");
        let h = PasswordHash::derive(b"x", b"saltsalt", 1);
        assert!(!format!("{h:?}").contains("hash:"));
    }

    #[test]
    fn which_modes_need_credentials() {
        let explicit = Mode::Explicit {
            authority: "a".into(),
            path: "/".into(),
            secure: false,
        };
        let connect = Mode::Connect {
            host: "a".into(),
            port: 443,
        };
        let transparent = Mode::Transparent {
            authority: "a".into(),
            path: "/".into(),
        };
        let url = Mode::UrlPath {
            authority: "a".into(),
            path: "/".into(),
        };
        let local = Mode::Local { path: "/".into() };
        for t in [TransparentAuth::Network, TransparentAuth::Refuse] {
            assert_eq!(need(&explicit, t), Need::Credentials);
            assert_eq!(need(&connect, t), Need::Credentials);
            assert_eq!(need(&local, t), Need::Nothing);
        }
        assert_eq!(need(&transparent, TransparentAuth::Network), Need::Nothing);
        assert_eq!(need(&url, TransparentAuth::Network), Need::Nothing);
        assert_eq!(need(&transparent, TransparentAuth::Refuse), Need::Refuse);
        assert_eq!(need(&url, TransparentAuth::Refuse), Need::Refuse);
    }

    #[test]
    fn cache_expires_and_stays_bounded() {
        let t0 = Instant::now();
        let mut c = VerifiedCache::new(Duration::from_secs(10), 3);
        let user: Arc<str> = Arc::from("alice");
        c.insert([1; 32], user.clone(), t0);
        assert_eq!(
            c.get(&[1; 32], t0 + Duration::from_secs(9)).as_deref(),
            Some("alice")
        );
        assert_eq!(c.get(&[1; 32], t0 + Duration::from_secs(10)), None);
        assert!(c.is_empty(), "an expired entry is dropped when found");
        assert_eq!(c.get(&[2; 32], t0), None);
        // Full: the entry closest to expiry goes.
        for i in 0..3u8 {
            c.insert([i; 32], user.clone(), t0 + Duration::from_secs(i as u64));
        }
        c.insert([9; 32], user.clone(), t0 + Duration::from_secs(5));
        assert_eq!(c.len(), 3);
        let at = t0 + Duration::from_secs(5);
        assert_eq!(c.get(&[0; 32], at), None);
        assert!(c.get(&[1; 32], at).is_some() && c.get(&[9; 32], at).is_some());
        // Full of expired entries: they all go.
        let late = t0 + Duration::from_secs(100);
        c.insert([7; 32], user.clone(), late);
        assert_eq!(c.len(), 1);
        for i in 0..100u8 {
            c.insert([i; 32], user.clone(), late);
            assert!(c.len() <= 3);
        }
    }

    #[test]
    fn challenge_and_refusals() {
        let users = parse_users(&format!(
            "a:{}\n",
            hash_password_with("p", b"saltsalt", FAST)
        ))
        .unwrap();
        let auth = Authenticator::new(users, "edge", TransparentAuth::Refuse);
        let r = auth.refusal(&AuthFailure::Invalid, false);
        assert_eq!(r.status, StatusCode::PROXY_AUTHENTICATION_REQUIRED);
        assert_eq!(
            r.headers.get(PROXY_AUTHENTICATE).unwrap(),
            "Basic realm=\"edge\", charset=\"UTF-8\""
        );
        assert!(!r.close);
        assert!(auth.refusal(&AuthFailure::Missing, true).close);
        let r = auth.refusal(&AuthFailure::Transparent, false);
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert!(r.headers.get(PROXY_AUTHENTICATE).is_none());
        let throttled = AuthFailure::Throttled(Duration::from_millis(2500));
        let r = auth.refusal(&throttled, false);
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers.get(RETRY_AFTER).unwrap(), "3");
        assert!(r.headers.get(PROXY_AUTHENTICATE).is_none());
        assert!(!r.close);
        assert!(auth.refusal(&throttled, true).close);
        assert!(throttled.message().contains("retry after 3 s"));
        assert_eq!(throttled.label(), "throttled");
        assert!(AuthFailure::LABELS.contains(&throttled.label()));
        assert!(check_realm("webpep proxy").is_ok());
        assert!(
            check_realm("a\"b").is_err() && check_realm("").is_err() && check_realm("é").is_err()
        );
    }

    #[tokio::test]
    async fn check_verifies_once_then_uses_the_cache() {
        let users = parse_users(&format!(
            "alice:{}\n",
            hash_password_with("pw:x", b"saltsalt", FAST)
        ))
        .unwrap();
        let auth = Authenticator::new(users, "r", TransparentAuth::Network);
        let m = Metrics::default();
        let hdr = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                PROXY_AUTHORIZATION,
                HeaderValue::from_str(&format!("Basic {}", b64(v))).unwrap(),
            );
            h
        };
        assert_eq!(
            &*auth
                .check(&hdr("alice:pw:x"), LOCAL, &m.auth_verifications)
                .await
                .unwrap(),
            "alice"
        );
        assert_eq!(
            &*auth
                .check(&hdr("alice:pw:x"), LOCAL, &m.auth_verifications)
                .await
                .unwrap(),
            "alice"
        );
        assert_eq!(
            m.auth_verifications
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert_eq!(
            auth.check(&hdr("alice:pw"), LOCAL, &m.auth_verifications)
                .await,
            Err(AuthFailure::Invalid)
        );
        assert_eq!(
            auth.check(&hdr("bob:pw:x"), LOCAL, &m.auth_verifications)
                .await,
            Err(AuthFailure::Invalid)
        );
        assert_eq!(
            auth.check(&HeaderMap::new(), LOCAL, &m.auth_verifications)
                .await,
            Err(AuthFailure::Missing)
        );
        // Failures are not remembered: each costs a hash.
        assert_eq!(
            m.auth_verifications
                .load(std::sync::atomic::Ordering::Relaxed),
            3
        );
    }

    fn policy(max_failures: u32) -> ThrottlePolicy {
        ThrottlePolicy {
            max_failures,
            backoff: secs(1),
            max_backoff: secs(60),
            window: secs(900),
        }
    }

    #[test]
    fn backoff_doubles_from_the_limit_and_is_capped() {
        let p = policy(5);
        assert_eq!(p.wait_after(0), None);
        assert_eq!(p.wait_after(4), None);
        let waits: Vec<u64> = (5..13)
            .map(|n| p.wait_after(n).unwrap().as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(p.wait_after(u32::MAX), Some(secs(60)));
        assert_eq!(policy(0).wait_after(u32::MAX), None);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
        // The defaults are `[auth]`'s.
        let d = ThrottlePolicy::default();
        assert_eq!(
            (d.max_failures, d.backoff, d.max_backoff),
            (5, secs(1), secs(60))
        );
    }

    #[test]
    fn throttle_makes_an_address_wait_after_repeated_failures() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + secs(s);
        let mut t = FailureThrottle::new(policy(5), 100);
        for i in 0..4 {
            assert_eq!(t.check(LOCAL, at(i)), Ok(()));
            assert_eq!(t.failed(LOCAL, at(i)), None, "failure {}", i + 1);
        }
        assert_eq!(t.check(LOCAL, at(4)), Ok(()));
        // The fifth in a row: a second's wait, whatever is presented.
        assert_eq!(t.failed(LOCAL, at(4)), Some(secs(1)));
        assert_eq!(
            t.check(LOCAL, at(4) + Duration::from_millis(300)),
            Err(Duration::from_millis(700))
        );
        assert_eq!(t.check(LOCAL, at(5)), Ok(()));
        // Each further failure doubles the wait, up to the cap.
        let mut now = at(5);
        for expected in [2, 4, 8, 16, 32, 60, 60] {
            assert_eq!(t.failed(LOCAL, now), Some(secs(expected)));
            assert_eq!(
                t.check(LOCAL, now + secs(expected) - Duration::from_millis(1)),
                Err(Duration::from_millis(1))
            );
            now += secs(expected);
            assert_eq!(t.check(LOCAL, now), Ok(()));
        }
        // Another address is not affected.
        assert_eq!(t.check(ip("127.0.0.2"), now - secs(1)), Ok(()));
        assert_eq!(t.failed(ip("127.0.0.2"), now), None);
        // A success forgets the failures: four more are tolerated again.
        t.succeeded(LOCAL);
        for _ in 0..4 {
            assert_eq!(t.failed(LOCAL, now), None);
        }
        assert_eq!(t.failed(LOCAL, now), Some(secs(1)));
        // A failure of a login checked before the wait began does not shorten it.
        assert_eq!(t.failed(LOCAL, now), Some(secs(2)));
        assert_eq!(t.check(LOCAL, now + secs(1)), Err(secs(1)));
    }

    #[test]
    fn throttle_forgets_failures_after_the_window() {
        let t0 = Instant::now();
        let mut t = FailureThrottle::new(policy(5), 100);
        for _ in 0..4 {
            t.failed(LOCAL, t0);
        }
        // Just inside the window the fifth counts; after it, counting starts again.
        let mut u = FailureThrottle::new(policy(5), 100);
        for _ in 0..4 {
            u.failed(LOCAL, t0);
        }
        assert_eq!(u.failed(LOCAL, t0 + secs(899)), Some(secs(1)));
        assert_eq!(t.check(LOCAL, t0 + secs(900)), Ok(()));
        assert!(t.is_empty(), "a forgotten entry is dropped when found");
        for _ in 0..4 {
            assert_eq!(t.failed(LOCAL, t0 + secs(900)), None);
        }
        // The window runs from the end of a wait, so long waits still grow.
        let long = ThrottlePolicy {
            max_backoff: secs(3600),
            ..policy(1)
        };
        let mut v = FailureThrottle::new(long, 100);
        let mut now = t0;
        for n in 0..12 {
            let wait = v.failed(LOCAL, now).unwrap();
            assert_eq!(wait, secs(1 << n).min(secs(3600)));
            now += wait + secs(899);
        }
    }

    #[test]
    fn throttle_counts_ipv6_clients_by_their_64() {
        let t0 = Instant::now();
        let mut t = FailureThrottle::new(policy(2), 100);
        assert_eq!(t.failed(ip("2001:db8:1:2::1"), t0), None);
        assert_eq!(t.failed(ip("2001:db8:1:2:ffff::9"), t0), Some(secs(1)));
        assert!(t.check(ip("2001:db8:1:2:1:2:3:4"), t0).is_err());
        assert_eq!(t.check(ip("2001:db8:1:3::1"), t0), Ok(()));
        // An IPv4 client seen through a dual-stack socket is that IPv4 address.
        assert_eq!(t.failed(ip("::ffff:192.0.2.7"), t0), None);
        assert_eq!(t.failed(ip("192.0.2.7"), t0), Some(secs(1)));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn throttle_off_remembers_nothing() {
        let t0 = Instant::now();
        let mut t = FailureThrottle::new(policy(0), 100);
        for i in 0..1000 {
            assert_eq!(t.failed(LOCAL, t0 + secs(i)), None);
        }
        assert_eq!(t.check(LOCAL, t0), Ok(()));
        assert!(t.is_empty());
    }

    #[test]
    fn throttle_stays_bounded() {
        let t0 = Instant::now();
        let addr = |i: u32| IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
        // Full of recent failures: the address whose last failure is oldest goes.
        let mut t = FailureThrottle::new(policy(1), 3);
        for i in 0..3 {
            t.failed(addr(i), t0 + secs(u64::from(i)));
        }
        t.failed(addr(9), t0 + secs(5));
        assert_eq!(t.len(), 3);
        let now = t0 + secs(5);
        assert_eq!(t.check(addr(0), now), Ok(()), "the oldest was evicted");
        assert!(t.map.contains_key(&addr(1)) && t.map.contains_key(&addr(9)));
        // Forgotten entries go before recent ones.
        let late = t0 + secs(5000);
        t.failed(addr(7), late);
        assert_eq!(t.len(), 1);
        for i in 0..10_000 {
            t.failed(addr(i), late);
            assert!(t.len() <= 3);
        }
        // A large map is pruned of forgotten entries as it grows, not only when full.
        let mut big = FailureThrottle::new(policy(5), 4096);
        for i in 0..2048 {
            big.failed(addr(i), t0);
        }
        assert_eq!(big.len(), 2048, "nothing to prune at 1024: all recent");
        big.failed(addr(50_000), t0 + secs(1000));
        assert_eq!(
            big.len(),
            1,
            "forgotten entries pruned at the doubling point"
        );
        for i in 0..5000 {
            big.failed(addr(i), late);
        }
        assert_eq!(big.len(), 4096);
    }

    #[tokio::test]
    async fn check_refuses_a_throttled_address_without_hashing() {
        let users = parse_users(&format!(
            "alice:{}\n",
            hash_password_with("pw", b"saltsalt", FAST)
        ))
        .unwrap();
        // A wait long enough that this test never sees it end.
        let auth =
            Authenticator::new(users, "r", TransparentAuth::Refuse).with_throttle(ThrottlePolicy {
                backoff: secs(600),
                max_backoff: secs(600),
                ..policy(3)
            });
        let m = Metrics::default();
        let hdr = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                PROXY_AUTHORIZATION,
                HeaderValue::from_str(&format!("Basic {}", b64(v))).unwrap(),
            );
            h
        };
        let verifications = || {
            m.auth_verifications
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        // Verified and cached before the guessing starts.
        assert!(auth
            .check(&hdr("alice:pw"), LOCAL, &m.auth_verifications)
            .await
            .is_ok());
        for _ in 0..3 {
            assert_eq!(
                auth.check(&hdr("alice:guess"), LOCAL, &m.auth_verifications)
                    .await,
                Err(AuthFailure::Invalid)
            );
        }
        assert_eq!(verifications(), 4);
        // Now neither a guess nor the right password (even remembered) is checked.
        for creds in ["alice:guess2", "alice:pw", "bob:x"] {
            match auth.check(&hdr(creds), LOCAL, &m.auth_verifications).await {
                Err(AuthFailure::Throttled(w)) => assert!(w > secs(590), "{w:?}"),
                other => panic!("{creds}: {other:?}"),
            }
        }
        assert_eq!(verifications(), 4, "no hash for a waiting address");
        // No credentials is not a login: the challenge as usual.
        assert_eq!(
            auth.check(&HeaderMap::new(), LOCAL, &m.auth_verifications)
                .await,
            Err(AuthFailure::Missing)
        );
        // Another address logs in (from the cache) and guesses (with a hash) as usual.
        let other = ip("127.0.0.2");
        assert!(auth
            .check(&hdr("alice:pw"), other, &m.auth_verifications)
            .await
            .is_ok());
        assert_eq!(
            auth.check(&hdr("alice:nope"), other, &m.auth_verifications)
                .await,
            Err(AuthFailure::Invalid)
        );
        assert_eq!(verifications(), 5);
        // A success forgets that address's failures.
        assert!(auth
            .check(&hdr("alice:pw"), other, &m.auth_verifications)
            .await
            .is_ok());
        assert_eq!(lock(&auth.throttle).len(), 1);
    }
}
