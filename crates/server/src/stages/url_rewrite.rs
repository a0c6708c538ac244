//! URL rewriting of HTML and CSS in URL mode (002 §3.1): `[url-rewrite]`. Applied even under
//! `no-transform`: without it the mode does not work at all.

use std::sync::Arc;

use http::header::{self, HeaderMap};

use crate::optimize::{mime_is, weaken_etag};
use crate::stage::{Applied, Registry, Section, Stage, StageCtx, StageFactory};
use crate::url_rewrite as rewrite;

pub(super) struct Factory;

impl StageFactory for Factory {
    fn name(&self) -> &'static str {
        "url-rewrite"
    }
    fn built_in(&self) -> bool {
        true
    }
    fn build(
        &self,
        section: Section<'_>,
        _registry: &mut Registry,
    ) -> Result<Option<Arc<dyn Stage>>, (String, String)> {
        match section {
            Section::BuiltIn(cfg) if cfg.url_rewrite.enabled => Ok(Some(Arc::new(UrlRewrite))),
            _ => Ok(None),
        }
    }
}

struct UrlRewrite;

impl Stage for UrlRewrite {
    fn name(&self) -> &'static str {
        "url-rewrite"
    }
    fn order(&self) -> i32 {
        200
    }
    fn variant_part(&self, ctx: &StageCtx<'_>) -> Option<String> {
        ctx.url_mode.map(|(_, a)| format!("url={a}"))
    }
    fn filters_bodies(&self) -> bool {
        true
    }
    fn wants_original(&self, _status: http::StatusCode, _headers: &HeaderMap) -> bool {
        // A body filter only: its wants_body says which bodies.
        false
    }
    fn wants_body(&self, headers: &HeaderMap, ctx: &StageCtx<'_>) -> bool {
        ctx.url_mode.is_some()
            && mime_is(headers, &["text/html", "application/xhtml+xml", "text/css"])
    }
    fn body_filter(&self, ctx: &StageCtx<'_>, headers: &mut HeaderMap, body: &[u8]) -> Applied {
        let Some((page, authority)) = ctx.url_mode else {
            return Applied::Unchanged("not url mode".into());
        };
        let out = if mime_is(headers, &["text/css"]) {
            rewrite::rewrite_css(body, page, authority)
        } else if mime_is(headers, &["text/html", "application/xhtml+xml"]) {
            match rewrite::rewrite_html(body, page, authority) {
                Ok(b) => b,
                Err(e) => return Applied::Unchanged(format!("html rewrite failed: {e}")),
            }
        } else {
            return Applied::Unchanged("not html or css".into());
        };
        if out == body {
            return Applied::Unchanged("no urls".into());
        }
        headers.remove(header::CONTENT_LENGTH);
        headers.remove("content-md5");
        weaken_etag(headers);
        Applied::Changed { body: out }
    }
}
