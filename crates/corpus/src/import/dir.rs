//! Static directory import: a tree of HTML files and their assets (the Debian `apache2-doc`
//! manual, a documentation build, a saved site) spread over N virtual domains.
//!
//! Every HTML file (`.html`, `.htm`, `.xhtml`, `name.html.<lang>`) becomes a page whose objects
//! are the files it references — images, stylesheets, scripts, icons, frames, preloads, and
//! what the stylesheets reference in turn — that exist in the tree. HTML files live on the
//! first domain (`www.<name>.test`); every other file goes to one of the N domains
//! (`www.<name>.test`, `static1.<name>.test`, ...) by a hash of its path, so the same tree
//! always gives the same spread. URL paths are the files' paths under the directory
//! (prefixed by the directory's name when several directories are imported). Documents are
//! rewritten so that references to files now on another domain are absolute URLs; references
//! on the same domain are left as they are. Symbolic links to files inside the tree are not
//! pages of their own (they would duplicate their targets), but references through them work.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::rng::hash_str;
use crate::scan::{css_refs, html_refs, rewrite, RefKind};

const HTML_CACHE: &str = "max-age=60";
const STATIC_CACHE: &str = "max-age=2592000";

struct Root {
    dir: PathBuf,
    canon: PathBuf,
    prefix: String,
}

struct Ctx {
    roots: Vec<Root>,
    hosts: Vec<String>,
    /// Stored objects by file (canonical path).
    done: HashMap<PathBuf, Object>,
    /// CSS references by file, for discovery.
    css_children: HashMap<PathBuf, Vec<PathBuf>>,
    used_hosts: BTreeSet<String>,
}

fn is_html_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.ends_with(".html")
        || n.ends_with(".htm")
        || n.ends_with(".xhtml")
        || n.contains(".html.")
        || n.contains(".htm.")
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn percent_encode_path(p: &str) -> String {
    let mut s = String::with_capacity(p.len());
    for c in p.chars() {
        if c.is_ascii_alphanumeric() || "/-._~!$&'()*+,;=:@".contains(c) {
            s.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                s.push_str(&format!("%{b:02X}"));
            }
        }
    }
    s
}

impl Ctx {
    /// The domain index of a file (by its URL path).
    fn domain_of(&self, url_path: &str) -> usize {
        if is_html_name(url_path) || self.hosts.len() <= 1 {
            0
        } else {
            (hash_str(url_path) % self.hosts.len() as u64) as usize
        }
    }

    /// URL path of a file under root `ri`.
    fn url_path(&self, ri: usize, file: &Path) -> Option<String> {
        let rel = file.strip_prefix(&self.roots[ri].dir).ok()?;
        let rel: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        Some(format!("{}/{}", self.roots[ri].prefix, rel.join("/")))
    }

    fn url_of(&self, url_path: &str) -> String {
        format!(
            "http://{}{}",
            self.hosts[self.domain_of(url_path)],
            percent_encode_path(url_path)
        )
    }

    /// The local file a resolved URL path names: (root index, file path), if it exists.
    fn lookup(&self, url_path: &str) -> Option<(usize, PathBuf)> {
        let path = percent_decode(url_path.split(['?', '#']).next().unwrap_or(""));
        for (ri, r) in self.roots.iter().enumerate() {
            let rest = if r.prefix.is_empty() {
                Some(path.as_str())
            } else {
                path.strip_prefix(&r.prefix).filter(|x| x.starts_with('/'))
            };
            let Some(rest) = rest else { continue };
            let rel = rest.trim_start_matches('/');
            if rel.split('/').any(|s| s == "..") {
                continue;
            }
            let f = r.dir.join(rel);
            if let Ok(c) = fs::canonicalize(&f) {
                if c.starts_with(&r.canon) && c.is_file() {
                    return Some((ri, f));
                }
            }
        }
        None
    }

    /// Resolves a reference in the document at `doc_url_path` (in the original single-host
    /// layout) to a local file.
    fn resolve_ref(&self, doc_url_path: &str, reference: &str) -> Option<(usize, PathBuf, String)> {
        let r = reference.trim();
        if r.is_empty() || r.starts_with('#') || r.contains("://") || r.starts_with("//") {
            return None;
        }
        let lower = r.to_ascii_lowercase();
        if lower.starts_with("data:")
            || lower.starts_with("javascript:")
            || lower.starts_with("mailto:")
        {
            return None;
        }
        let base =
            url::Url::parse(&format!("http://h{}", percent_encode_path(doc_url_path))).ok()?;
        let u = base.join(r).ok()?;
        let (ri, f) = self.lookup(u.path())?;
        let up = self.url_path(ri, &f)?;
        Some((ri, f, up))
    }

    /// Stores a file (rewritten if it is HTML or CSS) and returns its object.
    fn store(&mut self, b: &mut Builder, ri: usize, file: &Path) -> Result<Object, CorpusError> {
        let canon = fs::canonicalize(file).map_err(|e| crate::store::io(file, e))?;
        if let Some(o) = self.done.get(&canon) {
            return Ok(o.clone());
        }
        let url_path = self.url_path(ri, file).unwrap_or_else(|| "/".into());
        let url = self.url_of(&url_path);
        let my_domain = self.domain_of(&url_path);
        let bytes = fs::read(file).map_err(|e| crate::store::io(file, e))?;
        let mime = guess_type(&url_path);
        let mut children = Vec::new();
        let body = if mime == "text/html" || mime == "text/css" {
            let refs = if mime == "text/html" {
                html_refs(&bytes)
            } else {
                css_refs(&bytes)
            };
            let mut edits = Vec::new();
            for r in refs {
                if r.kind == RefKind::Base {
                    continue;
                }
                let Some((_, f, up)) = self.resolve_ref(&url_path, &r.url) else {
                    continue;
                };
                if mime == "text/css" {
                    children.push(f.clone());
                }
                if self.domain_of(&up) != my_domain {
                    let frag = r.url.find('#').map(|i| &r.url[i..]).unwrap_or("");
                    edits.push((r.span.clone(), format!("{}{}", self.url_of(&up), frag)));
                }
            }
            rewrite(&bytes, &edits)
        } else {
            bytes
        };
        let lm = fs::metadata(file)
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| http_date(d.as_secs()))
            .unwrap_or_else(|| DEFAULT_DATE.to_string());
        let cache = if mime == "text/html" {
            HTML_CACHE
        } else {
            STATIC_CACHE
        };
        let o = b.add_object(
            &url,
            mime,
            200,
            vec![("Cache-Control".into(), cache.into())],
            &body,
            &lm,
        )?;
        if let Some(h) = host_of(&url) {
            self.used_hosts.insert(h.to_string());
        }
        self.css_children.insert(canon.clone(), children);
        self.done.insert(canon, o.clone());
        Ok(o)
    }
}

fn walk(
    dir: &Path,
    roots_canon: &[PathBuf],
    out: &mut Vec<PathBuf>,
    links: &mut usize,
) -> Result<(), CorpusError> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| crate::store::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        let Ok(meta) = fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            // A link into the tree duplicates its target; a link out of it is content.
            match fs::canonicalize(&p) {
                Ok(c) if c.is_file() && !roots_canon.iter().any(|r| c.starts_with(r)) => {
                    out.push(p)
                }
                Ok(c) if c.is_file() => *links += 1,
                _ => {}
            }
        } else if meta.is_dir() {
            walk(&p, roots_canon, out, links)?;
        } else if meta.is_file() {
            out.push(p);
        }
    }
    Ok(())
}

/// Imports the directory trees (or single HTML files) `paths` as corpus `name` in `out_dir`,
/// spread over `domains` virtual domains.
pub fn import_dir(
    paths: &[PathBuf],
    out_dir: &Path,
    name: &str,
    domains: usize,
) -> Result<Corpus, CorpusError> {
    import_dir_limited(paths, out_dir, name, domains, Limits::default())
}

pub(crate) fn import_dir_limited(
    paths: &[PathBuf],
    out_dir: &Path,
    name: &str,
    domains: usize,
    limits: Limits,
) -> Result<Corpus, CorpusError> {
    let first = paths.first().cloned().unwrap_or_default();
    if paths.is_empty() {
        return Err(CorpusError::Import {
            path: first,
            message: "no directory given".into(),
        });
    }
    let domains = domains.max(1);
    let site = {
        let s = slug(name);
        if s.is_empty() {
            "site".to_string()
        } else {
            s
        }
    };
    let hosts: Vec<String> = (0..domains)
        .map(|i| {
            if i == 0 {
                format!("www.{site}.test")
            } else {
                format!("static{i}.{site}.test")
            }
        })
        .collect();
    // Roots and the HTML files that become pages.
    let mut roots: Vec<Root> = Vec::new();
    let mut page_files: Vec<(usize, PathBuf)> = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    for p in paths {
        let meta = fs::metadata(p).map_err(|e| crate::store::io(p, e))?;
        let (dir, files) = if meta.is_dir() {
            (p.clone(), None)
        } else {
            let parent = p
                .parent()
                .map(Path::to_path_buf)
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or_else(|| PathBuf::from("."));
            (parent, Some(vec![p.clone()]))
        };
        let canon = fs::canonicalize(&dir).map_err(|e| crate::store::io(&dir, e))?;
        let prefix = if paths.len() == 1 {
            String::new()
        } else {
            let base = slug(
                &dir.file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "root".into()),
            );
            let mut pfx = format!("/{base}");
            let mut k = 2;
            while prefixes.contains(&pfx) {
                pfx = format!("/{base}-{k}");
                k += 1;
            }
            pfx
        };
        prefixes.push(prefix.clone());
        let ri = match roots
            .iter()
            .position(|r| r.canon == canon && files.is_some())
        {
            Some(i) => i,
            None => {
                roots.push(Root {
                    dir: dir.clone(),
                    canon,
                    prefix,
                });
                roots.len() - 1
            }
        };
        match files {
            Some(fs_) => page_files.extend(fs_.into_iter().map(|f| (ri, f))),
            None => page_files.push((ri, PathBuf::new())), // placeholder: walk below
        }
    }
    let roots_canon: Vec<PathBuf> = roots.iter().map(|r| r.canon.clone()).collect();
    let mut pages_in: Vec<(usize, PathBuf)> = Vec::new();
    let mut links = 0usize;
    for (ri, f) in page_files {
        if f.as_os_str().is_empty() {
            let mut all = Vec::new();
            walk(&roots[ri].dir.clone(), &roots_canon, &mut all, &mut links)?;
            for f in all {
                if f.file_name()
                    .map(|n| is_html_name(&n.to_string_lossy()))
                    .unwrap_or(false)
                {
                    pages_in.push((ri, f));
                }
            }
        } else {
            pages_in.push((ri, f));
        }
    }

    let mut ctx = Ctx {
        roots,
        hosts: hosts.clone(),
        done: HashMap::new(),
        css_children: HashMap::new(),
        used_hosts: BTreeSet::new(),
    };
    let mut b = Builder::new(out_dir, &first, limits)?;
    let mut failed = 0usize;
    let mut first_error = String::new();
    for (ri, file) in &pages_in {
        let result = (|| -> Result<(String, Vec<Object>, usize), CorpusError> {
            let root_obj = ctx.store(&mut b, *ri, file)?;
            let url_path = ctx.url_path(*ri, file).unwrap_or_default();
            let bytes = fs::read(file).map_err(|e| crate::store::io(file, e))?;
            let mut objects = vec![root_obj];
            let mut queue: Vec<(usize, PathBuf)> = Vec::new();
            let mut missing = 0;
            for r in html_refs(&bytes) {
                if !r.kind.is_embedded() {
                    continue;
                }
                match ctx.resolve_ref(&url_path, &r.url) {
                    Some((rj, f, _)) => queue.push((rj, f)),
                    None => {
                        if !r.url.contains("://") && !r.url.starts_with("data:") {
                            missing += 1;
                        }
                    }
                }
            }
            // Breadth first: the page's references, then what stylesheets reference.
            let mut k = 0;
            while k < queue.len() && k < 10_000 {
                let (rj, f) = queue[k].clone();
                k += 1;
                let o = ctx.store(&mut b, rj, &f)?;
                if objects.iter().any(|x| x.url == o.url) {
                    continue;
                }
                objects.push(o);
                let canon = fs::canonicalize(&f).map_err(|e| crate::store::io(&f, e))?;
                if let Some(children) = ctx.css_children.get(&canon) {
                    for c in children.clone() {
                        if let Some(cj) =
                            (0..ctx.roots.len()).find(|&x| c.starts_with(&ctx.roots[x].dir))
                        {
                            queue.push((cj, c));
                        }
                    }
                }
            }
            Ok((url_path, objects, missing))
        })();
        match result {
            Ok((url_path, objects, missing)) => {
                let id = b.unique_id(url_path.trim_start_matches('/'));
                let miss = if missing > 0 {
                    format!("; warning: {missing} references to files not in the tree")
                } else {
                    String::new()
                };
                b.add_page(
                    id,
                    format!("directory {}{miss}", file.display()),
                    false,
                    objects,
                );
            }
            Err(e) => {
                failed += 1;
                if first_error.is_empty() {
                    first_error = e.to_string();
                }
            }
        }
    }
    let mut desc = format!(
        "Imported from {} over {} virtual domains: {} pages, {} files",
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        domains,
        b.page_count(),
        ctx.done.len()
    );
    if links > 0 {
        desc.push_str(&format!(
            "; {links} symbolic links into the tree not made pages"
        ));
    }
    if failed > 0 {
        desc.push_str(&format!("; {failed} pages failed (first: {first_error})"));
    }
    let used: Vec<String> = ctx.used_hosts.into_iter().collect();
    if used.len() < hosts.len() {
        desc.push_str(&format!(
            "; only {} of the {} domains have files",
            used.len(),
            hosts.len()
        ));
    }
    b.finish(&first, name, desc, &[])
}
