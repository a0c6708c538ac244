//! The objects of a page a load did not request (issue 36 item 2): the corpus knows the
//! page's objects, so every one the browser did not ask for is counted with why, and
//! requested + inlined + missing = the page's objects.

use std::collections::{BTreeMap, HashMap, HashSet};

use webpep_loader::PageLoad;

/// Why an object of the page was not requested, when the browser model could not say: nothing
/// it parsed refers to it (a script makes that request, or the model does not read that kind
/// of reference).
pub const NOT_REFERENCED: &str = "not referenced";
/// Why, for a real browser's load (which does not say).
pub const NOT_REQUESTED: &str = "not requested by the browser";

/// The page's objects a load did not request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Missing {
    /// The page's objects (the corpus's, one per URL).
    pub page_objects: usize,
    /// Of them, requested by the browser (whatever the answer, failures included).
    pub requested: usize,
    /// Not requested and not accounted for by the proxy's inlining.
    pub missing: usize,
    /// `missing` by reason: the browser model's ([`webpep_loader::Unrequested`] names), else
    /// [`NOT_REFERENCED`] (the model) or [`NOT_REQUESTED`] (real Chromium).
    pub why: BTreeMap<String, usize>,
}

/// An object's identity across schemes and proxies: host (with a port other than the
/// scheme's), path and query, no fragment. The h2 configurations fetch a capture's http://
/// objects over TLS, and a real browser upgrades names on its HSTS list, so `http://h/p` and
/// `https://h/p` are one object here.
pub fn key(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let host = u.host_str()?.to_ascii_lowercase();
    let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
    let query = u.query().map(|q| format!("?{q}")).unwrap_or_default();
    Some(format!("{host}{port}{}{query}", u.path()))
}

/// The page's objects that `load` did not request. `inlined`: objects webpep's edge proxy
/// copied into the load's pages (not requested, not missing: the proxy counts them, not
/// which). `rewritten`: the proxy prefix (`http://<edge>/`) of URL rewriting, under which
/// `http://<edge>/<host>/<path>` is the object `http://<host>/<path>`.
pub fn of(
    page: &webpep_corpus::Page,
    load: &PageLoad,
    inlined: usize,
    rewritten: Option<&str>,
    model: bool,
) -> Missing {
    let key_of_load = |url: &str| match rewritten.and_then(|p| url.strip_prefix(p)) {
        Some(rest) => key(&format!("http://{rest}")),
        None => key(url),
    };
    let requested: HashSet<String> = load
        .objects
        .iter()
        .filter_map(|o| key_of_load(&o.url))
        .collect();
    let reasons: HashMap<String, &'static str> = load
        .unrequested
        .iter()
        .filter_map(|u| Some((key_of_load(&u.url)?, u.reason.name())))
        .collect();
    let mut objects: Vec<String> = page.objects.iter().filter_map(|o| key(&o.url)).collect();
    objects.sort();
    objects.dedup();
    let mut m = Missing {
        page_objects: objects.len(),
        ..Missing::default()
    };
    let mut unexplained = 0usize;
    for k in &objects {
        if requested.contains(k) {
            m.requested += 1;
        } else if let Some(why) = reasons.get(k) {
            *m.why.entry(why.to_string()).or_default() += 1;
        } else {
            unexplained += 1;
        }
    }
    // What the proxy inlined is no longer referenced in the pages the browser received.
    let unexplained = unexplained.saturating_sub(inlined);
    if unexplained > 0 {
        let name = if model { NOT_REFERENCED } else { NOT_REQUESTED };
        m.why.insert(name.to_string(), unexplained);
    }
    m.missing = m.why.values().sum();
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use webpep_loader::{ObjectTiming, ResourceKind, Unrequested, UnrequestedRef};

    fn page(urls: &[&str]) -> webpep_corpus::Page {
        let manifest = serde_json::json!({
            "id": "p", "url": urls[0],
            "objects": urls.iter().map(|u| serde_json::json!({
                "url": u, "content_type": "image/gif", "status": 200, "headers": [],
                "versions": [],
            })).collect::<Vec<_>>(),
        });
        serde_json::from_value(manifest).expect("page")
    }

    fn load(urls: &[&str], unrequested: &[(&str, Unrequested)]) -> PageLoad {
        let mut l = webpep_loader::PageLoad {
            url: urls[0].into(),
            policy: webpep_loader::Policy::Http10,
            via_proxy: false,
            started: std::time::SystemTime::UNIX_EPOCH,
            plt: Default::default(),
            breakdown: Default::default(),
            objects: Vec::new(),
            main: 0,
            connections: Vec::new(),
            dns_lookups: Vec::new(),
            timed_out: false,
            objects_dropped: 0,
            unrequested: Vec::new(),
            tls_upgrades: Vec::new(),
        };
        l.objects = urls
            .iter()
            .enumerate()
            .map(|(i, u)| ObjectTiming::unanswered(i, u.to_string(), ResourceKind::Image))
            .collect();
        l.unrequested = unrequested
            .iter()
            .map(|(u, r)| UnrequestedRef {
                url: u.to_string(),
                kind: ResourceKind::Image,
                reason: *r,
            })
            .collect();
        l
    }

    #[test]
    fn every_object_of_the_page_is_requested_or_missing_with_why() {
        let p = page(&[
            "http://www.a.test/",
            "http://www.a.test/one.gif",
            "https://www.a.test/one.gif",
            "http://img.a.test:8080/two.gif?x=1",
            "http://img.a.test/never.gif",
            "http://img.a.test/js.gif",
            "http://img.a.test/inlined.gif",
        ]);
        // The h2 configurations ask for the https twin: one object, requested.
        let l = load(
            &[
                "https://www.a.test/",
                "https://www.a.test/one.gif#top",
                "http://img.a.test:8080/two.gif?x=1",
                "http://elsewhere.test/favicon.ico",
            ],
            &[("http://img.a.test/never.gif", Unrequested::NotUsed)],
        );
        let m = of(&p, &l, 1, None, true);
        assert_eq!((m.page_objects, m.requested, m.missing), (6, 3, 2));
        assert_eq!(
            m.why.into_iter().collect::<Vec<_>>(),
            vec![("not referenced".into(), 1), ("not used".into(), 1)]
        );
        // Real Chromium says nothing; without inlining both are missing.
        let m = of(&p, &l, 0, None, false);
        assert_eq!(m.requested + m.missing, m.page_objects);
        assert_eq!(m.why.get(NOT_REQUESTED), Some(&2));
    }

    #[test]
    fn url_rewriting_is_undone() {
        let p = page(&["http://www.a.test/", "http://img.a.test/x.gif?q"]);
        let l = load(
            &[
                "http://10.0.0.1/www.a.test/",
                "http://10.0.0.1/img.a.test/x.gif?q",
            ],
            &[],
        );
        let m = of(&p, &l, 0, Some("http://10.0.0.1/"), true);
        assert_eq!((m.requested, m.missing), (2, 0));
    }
}
