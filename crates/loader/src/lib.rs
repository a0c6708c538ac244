//! webpep's page loader: a browser model for the lab (DESIGN §7.4).
//!
//! It resolves names by asking a configured resolver (never the system's), fetches a page,
//! discovers its embedded objects in HTML (as the bytes arrive, like a preload scanner) and
//! CSS, and fetches them under a browser [`Policy`] — `http10`, `http11` (2 per host),
//! `http11-6`, `pipelining`, `h2` — directly or through an explicit HTTP proxy. It records
//! HAR 1.2 timings for every object, the page load time and its breakdown into DNS,
//! connection setup, idle and payload time (DESIGN §7.5).
//!
//! Everything runs in the caller's task (nothing is spawned), so every socket is created on
//! the calling thread: the lab runs the loader on a thread that entered the `ue` network
//! namespace, with a current-thread tokio runtime.
//!
//! # The model
//!
//! - **Discovery.** The page's HTML is scanned as its bytes arrive (lol_html): `img` (`src`, or
//!   the largest `srcset` candidate), `script src`, `link rel=stylesheet|preload|modulepreload|
//!   icon`, `iframe`/`frame src` (scanned in turn), `input type=image`, `video poster`,
//!   `embed`, `object data`, `background` attributes, `<base href>`, inline `<style>` and
//!   `style` attributes. Stylesheets are scanned for `@import` and `url()` when complete,
//!   recursively (up to [`LoaderConfig::max_nesting`]); `@import`s are fetched at once, a
//!   sheet's images and fonts once the page using it is laid out (its parser has reached the
//!   body; [`LoaderConfig::css_images_at_layout`]), and only those the page uses
//!   ([`LoaderConfig::match_style_rules`]): a rule's images once an element matches the rule
//!   ([`selectors`]), the font faces its text is set in, nothing under media that do not
//!   apply on [`LoaderConfig::viewport`] ([`media`], [`stylesheet`]). Without a preload scanner
//!   ([`LoaderConfig::blocking_scripts`]) a script stops the parser until it has arrived;
//!   [`LoaderConfig::link_preload`] off ignores `rel=preload`. Each URL (without fragment) is
//!   fetched once; only http(s) URLs are fetched. What the page refers to and the model does
//!   not request (a rule no element matches, what a parser had not reached when the load
//!   ended, an embedded object's redirect target, ...) is listed in
//!   [`PageLoad::unrequested`] with why.
//! - **Scheduling.** Objects queue in discovery order and bind late to connections: a request
//!   goes on the least loaded ready connection of its host with room (1 request for `http10`
//!   and `http11`, `depth` for pipelining, unlimited streams for h2); otherwise a new
//!   connection is opened if the policy allows (`http10`: 8 per host, each used once;
//!   `http11`/pipelining: `per_host`; h2: one per origin); otherwise it waits. Through a proxy
//!   the limit applies to connections to the proxy; plain-http requests share them, https
//!   objects get `CONNECT` tunnels per origin, and an idle connection bound elsewhere is
//!   closed to make room.
//! - **Failures.** A request whose connection closes before any response byte is re-sent
//!   (at most [`LoaderConfig::max_retries`] times), first on its new connection. A failed
//!   connection attempt fails every object waiting for that origin when no other connection to
//!   it is open. DNS failures fail the name's objects for the rest of the load. Status codes
//!   (4xx, 5xx) are recorded, not errors. Redirects are followed for the main page only.
//! - **Caches.** DNS answers are kept for their TTL (at least [`LoaderConfig::dns_min_ttl`]);
//!   a lookup's answer serves the connections opened right after it even with TTL 0. The HTTP
//!   cache keeps validators (and the bodies of HTML and CSS, for discovery): a revisit sends
//!   `If-None-Match`/`If-Modified-Since` and a 304 counts as a hit. Freshness is not used:
//!   every cached object is revalidated, as on a reload.
//!
//! ```no_run
//! # async fn demo() {
//! use webpep_loader::{load_page, LoaderConfig, Policy};
//! let cfg = LoaderConfig::new(Policy::Http11 { per_host: 6 }, "10.0.0.1:53".parse().unwrap());
//! let page = load_page("http://www.example.test/", &cfg).await;
//! println!("PLT {:?}, {} objects, {} errors", page.plt, page.objects.len(), page.errors());
//! let har = page.to_har("page_1");
//! # let _ = har;
//! # }
//! ```

mod config;
mod content_coding;
pub mod discover;
pub mod dns;
mod driver;
mod engine;
mod error;
pub mod h1;
mod har;
pub mod media;
mod net;
pub mod reference;
pub mod request_headers;
mod result;
pub mod selectors;
pub mod stylesheet;

pub use config::{LoaderConfig, Policy};
pub use discover::ResourceKind;
pub use engine::{load_page, Loader};
pub use error::{ConfigError, FetchError};
pub use har::iso8601;
pub use media::Viewport;
pub use net::{Origin, Protocol};
pub use request_headers::{KindHeaders, RefererPolicy};
pub use result::{
    breakdown_of_objects, Breakdown, ConnectionInfo, DnsLookup, ObjectTiming, PageLoad, Timings,
    Unrequested, UnrequestedRef,
};

#[cfg(test)]
mod tests {
    #[test]
    fn load_future_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let cfg = crate::LoaderConfig::default();
        let fut = crate::load_page("http://x.test/", &cfg);
        assert_send(&fut);
        let mut loader = crate::Loader::new(cfg.clone());
        let fut = loader.load("http://x.test/");
        assert_send(&fut);
    }
}
