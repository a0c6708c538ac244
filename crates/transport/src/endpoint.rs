//! quinn endpoints for the edge and the client: TLS 1.3 on ring, mutual authentication with
//! the edge's CA ([`crate::credential`]), the link-aware congestion controller, and the
//! transport settings a slow link wants.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use crate::congestion::{ControllerFactory, LinkMemory};
use crate::credential::{Credential, CredentialError, EdgeIdentity, Revocations, EDGE_SERVER_NAME};

/// The ALPN protocol of webpep's transport; a peer offering anything else fails the
/// handshake.
pub const ALPN: &[u8] = b"webpep";

/// Transport settings shared by both ends.
#[derive(Clone)]
pub struct TransportSettings {
    /// A keep-alive after this long without traffic: it detects a stalled link (and keeps a
    /// NAT binding) long before the idle timeout.
    pub keep_alive: Duration,
    /// The connection is given up after this long without hearing from the peer (outages of
    /// a minute happen on these links; the client reconnects after).
    pub idle_timeout: Duration,
    /// The RTT assumed before the first sample (quinn's default is 333 ms; a GPRS RTT is
    /// 0.6–3 s, and too short a guess retransmits the handshake needlessly).
    pub initial_rtt: Duration,
    /// Requests (bidirectional streams) the peer may have open at once.
    pub max_streams: u32,
    /// The congestion controller: webpep's link-aware one, or (for comparison) quinn's.
    pub congestion: Congestion,
    /// Header compression across the connection (the table of fields already sent); off
    /// only to measure what it is worth.
    pub header_table: bool,
    /// The largest UDP payload sent from the start. quinn starts at 1200 bytes and probes
    /// upwards to 1452; each probe is a full-size packet that carries nothing, and over a
    /// 12 kbit/s uplink a probe search costs seconds, more than it ever saves on a page. So
    /// webpep starts at a size nearly every path carries (1350, as browsers' QUIC does) and
    /// does not probe; a path that drops such packets is detected (a burst of lost full-size
    /// packets) and the connection falls back to 1200.
    pub initial_mtu: u16,
    /// Path-MTU probing (quinn's search up to 1452 bytes); off by default, see `initial_mtu`.
    pub mtu_discovery: bool,
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings {
            keep_alive: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(120),
            initial_rtt: Duration::from_millis(1000),
            max_streams: 256,
            congestion: Congestion::LinkAware(ControllerFactory::default()),
            header_table: true,
            initial_mtu: 1350,
            mtu_discovery: false,
        }
    }
}

/// A connection's congestion controller.
#[derive(Clone)]
pub enum Congestion {
    /// webpep's link-aware controller; each connection starts from its factory's memory.
    LinkAware(ControllerFactory),
    /// One of quinn's (Cubic, BBR), for comparison.
    Quinn(Arc<dyn quinn::congestion::ControllerFactory + Send + Sync>),
}

impl TransportSettings {
    /// The same settings, the link-aware controller starting from `memory` (what the last
    /// connection over the same link learned) and named `label` in its log lines; quinn's
    /// controllers have neither.
    pub fn remembering(&self, memory: LinkMemory, label: &str) -> TransportSettings {
        let mut s = self.clone();
        if let Congestion::LinkAware(f) = &mut s.congestion {
            f.memory = memory;
            f.label = label.into();
        }
        s
    }
}

impl std::fmt::Debug for TransportSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportSettings")
            .field("keep_alive", &self.keep_alive)
            .field("idle_timeout", &self.idle_timeout)
            .field("initial_rtt", &self.initial_rtt)
            .field("max_streams", &self.max_streams)
            .field("header_table", &self.header_table)
            .field("initial_mtu", &self.initial_mtu)
            .field("mtu_discovery", &self.mtu_discovery)
            .finish_non_exhaustive()
    }
}

impl TransportSettings {
    fn quinn(&self) -> quinn::TransportConfig {
        let mut t = quinn::TransportConfig::default();
        t.keep_alive_interval(Some(self.keep_alive));
        if let Ok(idle) = quinn::IdleTimeout::try_from(self.idle_timeout) {
            t.max_idle_timeout(Some(idle));
        }
        t.initial_rtt(self.initial_rtt);
        t.max_concurrent_bidi_streams(self.max_streams.into());
        t.max_concurrent_uni_streams(4u32.into());
        t.congestion_controller_factory(match &self.congestion {
            Congestion::LinkAware(f) => Arc::new(f.clone()),
            Congestion::Quinn(f) => f.clone(),
        });
        t.initial_mtu(self.initial_mtu);
        if !self.mtu_discovery {
            t.mtu_discovery_config(None);
        }
        t
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Client certificates must chain to the edge's CA (webpki does that) and must not be on the
/// revocation list (checked here, at each handshake).
#[derive(Debug)]
struct EnrolledClients {
    chain: Arc<dyn ClientCertVerifier>,
    revocations: Arc<Revocations>,
}

impl ClientCertVerifier for EnrolledClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chain.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .chain
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.revocations.is_revoked(end_entity) {
            tracing::info!(
                fingerprint = %crate::credential::fingerprint(end_entity),
                "refused a revoked client credential"
            );
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Revoked,
            ));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }
}

/// The edge's QUIC server configuration: only clients this edge enrolled and did not revoke
/// complete the handshake.
pub fn server_config(
    identity: &EdgeIdentity,
    revocations: Arc<Revocations>,
    settings: &TransportSettings,
) -> Result<quinn::ServerConfig, CredentialError> {
    let mut roots = RootCertStore::empty();
    roots.add(identity.ca_der().clone())?;
    let chain = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    let verifier = Arc::new(EnrolledClients { chain, revocations });
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            identity.server_chain.clone(),
            identity.server_key.clone_key(),
        )?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    // 0-RTT: a reconnecting client's first requests go with its first packet. Requests are
    // idempotent-checked by the proxies before they are sent early.
    tls.max_early_data_size = u32::MAX;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(settings.quinn()));
    Ok(config)
}

/// The client's QUIC configuration: it trusts only its edge's CA and presents its credential.
pub fn client_config(
    credential: &Credential,
    settings: &TransportSettings,
) -> Result<quinn::ClientConfig, CredentialError> {
    let mut roots = RootCertStore::empty();
    roots.add(credential.edge_ca_der()?)?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![credential.cert_der()?], credential.key_der()?)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.enable_early_data = true;
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(settings.quinn()));
    Ok(config)
}

/// Opens a connection to the edge at `addr` from `endpoint`, naming the edge by its fixed
/// certificate name (the client reaches its edge at whatever address).
pub async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    config: quinn::ClientConfig,
) -> Result<quinn::Connection, ConnectError> {
    let connecting = endpoint
        .connect_with(config, addr, EDGE_SERVER_NAME)
        .map_err(ConnectError::Start)?;
    connecting.await.map_err(ConnectError::Handshake)
}

/// Like [`connect`], but when this client holds a session ticket from an earlier connection
/// to the edge it returns at once, before the handshake completes (0-RTT): what is sent
/// first goes in the first flight and the reconnection costs no round trip over the air.
/// The second value resolves when the handshake has completed: `true` when the edge took
/// what went early, `false` when it refused it (it was lost: an edge restarted since the
/// ticket). `None`: no ticket, the handshake was done in full before returning. Only what
/// may be received twice goes early (a replayed first flight would repeat it).
pub async fn connect_early(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    config: quinn::ClientConfig,
) -> Result<(quinn::Connection, Option<quinn::ZeroRttAccepted>), ConnectError> {
    let connecting = endpoint
        .connect_with(config, addr, EDGE_SERVER_NAME)
        .map_err(ConnectError::Start)?;
    match connecting.into_0rtt() {
        Ok((conn, accepted)) => Ok((conn, Some(accepted))),
        Err(connecting) => connecting
            .await
            .map(|c| (c, None))
            .map_err(ConnectError::Handshake),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot start a connection: {0}")]
    Start(quinn::ConnectError),
    #[error("the edge did not accept the connection: {0}")]
    Handshake(quinn::ConnectionError),
}

/// The client certificate a connection was authenticated with (the edge's side).
pub fn peer_certificate(conn: &quinn::Connection) -> Option<CertificateDer<'static>> {
    let identity = conn.peer_identity()?;
    let chain = identity.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    chain.into_iter().next()
}

/// A connection's path as the sender sees it: what the edge scales its decisions by for a
/// client proxy, as it reads `TCP_INFO` for a browser's TCP connection.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathEstimate {
    /// Delivery rate, bytes per second: the link-aware controller's measured rate; for
    /// another controller (quinn's Cubic or BBR, kept for comparison) the rate its window
    /// allows, window ÷ smoothed RTT. `None` before anything was measured.
    pub rate: Option<f64>,
    /// The least RTT seen (the handshake gives the first sample).
    pub min_rtt: Duration,
    /// The smoothed RTT.
    pub srtt: Duration,
}

/// `conn`'s path as its congestion controller and RTT estimator know it now.
pub fn path_estimate(conn: &quinn::Connection) -> PathEstimate {
    let path = conn.stats().path;
    let controller = conn.congestion_state().into_any();
    let rate = match controller.downcast::<crate::congestion::Controller>() {
        // The rate as soon as one is measured: a connection still in its cold start (on a
        // fast path its rate keeps growing for many round trips) has carried at least that.
        Ok(c) => c.core().rate(),
        Err(_) => (!path.rtt.is_zero()).then(|| path.cwnd as f64 / path.rtt.as_secs_f64()),
    };
    PathEstimate {
        rate: rate.filter(|r| r.is_finite() && *r > 0.0),
        min_rtt: path.min_rtt,
        srtt: path.rtt,
    }
}

/// Keeps `conn`'s send window at its link-aware controller's stream budget for as long as
/// the connection lives (quinn's stock controllers have none: their send window stays).
/// [`crate::session::Session`] does this for the proxies' connections.
pub fn follow_send_budget(conn: &quinn::Connection) {
    let Ok(controller) = conn
        .congestion_state()
        .into_any()
        .downcast::<crate::congestion::Controller>()
    else {
        return;
    };
    let Some(budget) = controller.send_budget() else {
        return;
    };
    conn.set_send_window(budget.bytes());
    let conn = conn.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = budget.changed() => conn.set_send_window(budget.bytes()),
                _ = conn.closed() => break,
            }
        }
    });
}

/// How many client addresses' links the edge remembers (forgotten all at once when full).
const REMEMBERED_PEERS: usize = 65_536;

/// The edge's QUIC configuration, per connection: each client's link-aware controller starts
/// from what the edge's last connection to the same address learned, not from another
/// client's link (a phone on GPRS must not be sent an LTE client's window).
pub struct EdgeTransport {
    identity: Arc<EdgeIdentity>,
    base: quinn::ServerConfig,
    settings: TransportSettings,
    peers: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, LinkMemory>>,
}

impl EdgeTransport {
    /// The edge's transport for enrolled clients of `identity`.
    pub fn new(
        identity: Arc<EdgeIdentity>,
        settings: &TransportSettings,
    ) -> Result<EdgeTransport, CredentialError> {
        let base = server_config(&identity, identity.revocations(), settings)?;
        Ok(EdgeTransport {
            identity,
            base,
            settings: settings.clone(),
            peers: Default::default(),
        })
    }

    /// The configuration to open the endpoint with (connections are accepted with
    /// [`EdgeTransport::accept`]).
    pub fn server_config(&self) -> quinn::ServerConfig {
        self.base.clone()
    }

    /// The edge's identity (its CA, enrolled and revoked clients).
    pub fn identity(&self) -> &Arc<EdgeIdentity> {
        &self.identity
    }

    /// The memory of the link to `peer`'s address.
    pub fn memory_of(&self, peer: std::net::IpAddr) -> LinkMemory {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if peers.len() >= REMEMBERED_PEERS && !peers.contains_key(&peer) {
            peers.clear();
        }
        peers.entry(peer).or_default().clone()
    }

    /// Accepts `incoming` with a controller that starts from its address's memory.
    pub fn accept(
        &self,
        incoming: quinn::Incoming,
    ) -> Result<quinn::Connecting, quinn::ConnectionError> {
        let peer = incoming.remote_address().ip();
        let settings = self
            .settings
            .remembering(self.memory_of(peer), &format!("edge to {peer}"));
        let mut config = self.base.clone();
        config.transport_config(Arc::new(settings.quinn()));
        incoming.accept_with(Arc::new(config))
    }
}
