//! The built-in stages ([`crate::stage`]): one file each. A new stage is a new file here and
//! its line in [`default_stages`].

mod compress;
mod inline;
mod prefetch;
mod server_timing;
mod transcode;
mod url_rewrite;

use std::collections::BTreeMap;

use crate::stage::{KeyDoc, StageFactory};

/// The built-in stages' factories. Body filters run by each stage's `order()`, not by
/// their place here.
pub fn default_stages() -> Vec<Box<dyn StageFactory>> {
    vec![
        Box::new(transcode::Factory),
        Box::new(url_rewrite::Factory),
        Box::new(compress::Factory),
        Box::new(inline::Factory),
        Box::new(prefetch::Factory),
        Box::new(server_timing::Factory),
    ]
}

/// The `[stages.NAME]` keys of every stage that has a section of its own, for documentation
/// and `--print-config`.
pub fn documented_keys() -> BTreeMap<&'static str, &'static [KeyDoc]> {
    default_stages()
        .iter()
        .filter(|f| !f.built_in())
        .map(|f| (f.name(), f.keys()))
        .collect()
}
