//! Inlining of small stylesheets, scripts and images into pages: `[inline]`. The stage gives
//! the page's cache variant; the fetching and copying run as the pipeline's inline phase
//! ([`crate::proxy`], [`crate::inline`]), since they make sub-requests through it.

use std::sync::Arc;

use crate::stage::{Registry, Section, Stage, StageCtx, StageFactory};

pub(super) struct Factory;

impl StageFactory for Factory {
    fn name(&self) -> &'static str {
        "inline"
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
            Section::BuiltIn(cfg) if cfg.inline.enabled => Ok(Some(Arc::new(Inline {
                images: cfg.inline.images,
            }))),
            _ => Ok(None),
        }
    }
}

struct Inline {
    images: bool,
}

impl Stage for Inline {
    fn name(&self) -> &'static str {
        "inline"
    }
    fn order(&self) -> i32 {
        // No body filter (the inline phase runs before the body filters); after them, its
        // part of the variant key comes last, as before the stages, so stored keys still match.
        400
    }
    fn variant_part(&self, ctx: &StageCtx<'_>) -> Option<String> {
        // A page without data: images for one browser is not the page for another.
        let images = self.images && crate::inline::data_uri_images(ctx.client_headers);
        Some(if images { "inline+img" } else { "inline" }.into())
    }
}
