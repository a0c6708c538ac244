//! What a request says besides its target: the browser's common headers, those that depend on
//! what is requested (a stylesheet's Accept, a document's Upgrade-Insecure-Requests) and the
//! `Referer`. On a 12 kbit/s uplink these bytes are part of what an object costs: today's
//! Chromium sends about 380 bytes per request, Mozilla 1.4 about 450.

use url::Url;

use crate::discover::ResourceKind;

/// Which `Referer` a request carries: the URL of the document or stylesheet that referenced
/// the object (an `@import`ed sheet's images name that sheet, a frame's images the frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RefererPolicy {
    /// No `Referer`.
    Never,
    /// The whole referring URL, except from https to http: Mozilla 1.x, whose
    /// `network.http.sendRefererHeader` defaulted to 2 (links and images).
    Full,
    /// Today's browsers (Fetch's `strict-origin-when-cross-origin`, Chromium's default since
    /// version 85): the whole URL within an origin, only the origin to another, nothing from
    /// https to http.
    #[default]
    StrictOriginWhenCrossOrigin,
}

impl RefererPolicy {
    /// The `Referer` value for a request to `to` referenced from `from`, if any.
    pub fn referer(self, from: &Url, to: &Url) -> Option<String> {
        if self == RefererPolicy::Never
            || !matches!(from.scheme(), "http" | "https")
            || (from.scheme() == "https" && to.scheme() != "https")
        {
            return None;
        }
        let same_origin = from.origin() == to.origin();
        if self == RefererPolicy::StrictOriginWhenCrossOrigin && !same_origin {
            return Some(format!("{}/", from.origin().ascii_serialization()));
        }
        // Credentials and the fragment are never sent.
        let mut whole = from.clone();
        whole.set_fragment(None);
        let _ = whole.set_username("");
        let _ = whole.set_password(None);
        Some(whole.to_string())
    }
}

/// Headers sent only with requests for some kinds of object, after the common ones; one named
/// like a common header (Accept) takes its place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindHeaders(pub Vec<(Vec<ResourceKind>, String, String)>);

impl KindHeaders {
    /// The headers for a request for `kind`, in the order given.
    pub fn for_kind(&self, kind: ResourceKind) -> impl Iterator<Item = (String, String)> + '_ {
        self.0
            .iter()
            .filter(move |(kinds, _, _)| kinds.contains(&kind))
            .map(|(_, n, v)| (n.clone(), v.clone()))
    }
}

/// `common` with every header that `own` also names given `own`'s value in its place, then
/// the rest of `own`: a request's own Accept replaces the browser's usual one where the
/// browser puts it.
pub fn merge(common: &[(String, String)], own: &[(String, String)]) -> Vec<(String, String)> {
    let mut used = vec![false; own.len()];
    let mut out: Vec<(String, String)> = common
        .iter()
        .map(|(n, v)| {
            match own
                .iter()
                .position(|(m, _)| m.eq_ignore_ascii_case(n))
                .filter(|&i| !used[i])
            {
                Some(i) => {
                    used[i] = true;
                    own[i].clone()
                }
                None => (n.clone(), v.clone()),
            }
        })
        .collect();
    out.extend(
        own.iter()
            .zip(used)
            .filter(|(_, u)| !u)
            .map(|(h, _)| h.clone()),
    );
    out
}

/// Headers that belong to one HTTP/1.1 connection and are not sent over HTTP/2 (RFC 9113
/// §8.2.2).
pub fn is_connection_specific(name: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn referer_follows_the_policy() {
        let page = u("http://user:pw@www.cnn.com/news/index.html#top");
        let same = u("http://www.cnn.com/css/main.css");
        let other = u("http://i.cnn.net/a.gif");
        let full = RefererPolicy::Full;
        let today = RefererPolicy::StrictOriginWhenCrossOrigin;
        assert_eq!(
            full.referer(&page, &other).as_deref(),
            Some("http://www.cnn.com/news/index.html")
        );
        assert_eq!(
            today.referer(&page, &same).as_deref(),
            Some("http://www.cnn.com/news/index.html")
        );
        assert_eq!(
            today.referer(&page, &other).as_deref(),
            Some("http://www.cnn.com/")
        );
        // Another port is another origin.
        assert_eq!(
            today
                .referer(&page, &u("http://www.cnn.com:8080/x"))
                .as_deref(),
            Some("http://www.cnn.com/")
        );
        // Never from https to http; to https from http the policy applies.
        let secure = u("https://www.amazon.com/");
        for p in [full, today] {
            assert_eq!(p.referer(&secure, &u("http://img.amazon.com/a.gif")), None);
        }
        assert_eq!(
            today
                .referer(&u("http://img.amazon.com/css/at.css"), &secure)
                .as_deref(),
            Some("http://img.amazon.com/")
        );
        assert_eq!(RefererPolicy::Never.referer(&page, &same), None);
        assert_eq!(today.referer(&u("data:text/css,x"), &same), None);
    }

    #[test]
    fn own_headers_replace_common_ones_in_place() {
        let h = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        let common = h(&[("Accept", "*/*"), ("Accept-Language", "en")]);
        let own = h(&[("Referer", "http://a/"), ("accept", "text/css")]);
        assert_eq!(
            merge(&common, &own),
            h(&[
                ("accept", "text/css"),
                ("Accept-Language", "en"),
                ("Referer", "http://a/")
            ])
        );
        assert_eq!(merge(&common, &[]), common);
        let kinds = KindHeaders(vec![
            (
                vec![ResourceKind::Document, ResourceKind::Iframe],
                "Upgrade-Insecure-Requests".into(),
                "1".into(),
            ),
            (vec![ResourceKind::Image], "Accept".into(), "image/*".into()),
        ]);
        assert_eq!(kinds.for_kind(ResourceKind::Iframe).count(), 1);
        assert_eq!(
            kinds.for_kind(ResourceKind::Image).collect::<Vec<_>>(),
            h(&[("Accept", "image/*")])
        );
        assert_eq!(kinds.for_kind(ResourceKind::Script).count(), 0);
        assert!(is_connection_specific("Keep-Alive"));
        assert!(!is_connection_specific("Accept"));
    }
}
