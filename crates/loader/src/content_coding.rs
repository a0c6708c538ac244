//! Content codings (RFC 9110 §8.4) the browser model undoes so that it can find the embedded
//! objects of compressed HTML and CSS: gzip, deflate, br and zstd — streamed, because a
//! browser's parser sees a compressed page as it arrives, not when it is complete. Bounded:
//! a decompression bomb stops at the limit instead of filling memory.

use std::io::Write;

/// At most this many decoded bytes per body (a page larger than this is not a web page).
pub(crate) const MAX_DECODED: usize = 64 << 20;

/// A writer that keeps what it is given, up to [`MAX_DECODED`] bytes.
#[derive(Default)]
pub(crate) struct Sink(Vec<u8>, usize);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.1 + b.len() > MAX_DECODED {
            return Err(std::io::Error::other("decoded body over the limit"));
        }
        self.1 += b.len();
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One body's streaming decoder.
pub(crate) enum StreamDecoder {
    Gzip(flate2::write::MultiGzDecoder<Sink>),
    Deflate(flate2::write::ZlibDecoder<Sink>),
    Br(Box<brotli::DecompressorWriter<Sink>>),
    Zstd(zstd::stream::write::Decoder<'static, Sink>),
    /// Corrupt input or over the limit: nothing more comes out.
    Failed,
}

impl StreamDecoder {
    /// The decoder for a `Content-Encoding` value; None for identity (or no header) and for
    /// codings the browser model does not know (their bytes are passed on as they are).
    pub(crate) fn for_coding(content_encoding: Option<&str>) -> Option<StreamDecoder> {
        let ce = content_encoding?.trim().to_ascii_lowercase();
        Some(match ce.as_str() {
            "gzip" | "x-gzip" => {
                StreamDecoder::Gzip(flate2::write::MultiGzDecoder::new(Sink::default()))
            }
            "deflate" => StreamDecoder::Deflate(flate2::write::ZlibDecoder::new(Sink::default())),
            "br" => StreamDecoder::Br(Box::new(brotli::DecompressorWriter::new(
                Sink::default(),
                4096,
            ))),
            "zstd" => match zstd::stream::write::Decoder::new(Sink::default()) {
                Ok(d) => StreamDecoder::Zstd(d),
                Err(_) => StreamDecoder::Failed,
            },
            _ => return None,
        })
    }

    /// Feeds compressed bytes; returns the bytes decoded so far and not yet returned.
    pub(crate) fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        let r = match self {
            StreamDecoder::Gzip(d) => d.write_all(data).and_then(|_| d.flush()),
            StreamDecoder::Deflate(d) => d.write_all(data).and_then(|_| d.flush()),
            StreamDecoder::Br(d) => d.write_all(data).and_then(|_| d.flush()),
            StreamDecoder::Zstd(d) => d.write_all(data).and_then(|_| d.flush()),
            StreamDecoder::Failed => return Vec::new(),
        };
        if r.is_err() {
            *self = StreamDecoder::Failed;
            return Vec::new();
        }
        let sink = match self {
            StreamDecoder::Gzip(d) => d.get_mut(),
            StreamDecoder::Deflate(d) => d.get_mut(),
            StreamDecoder::Br(d) => d.get_mut(),
            StreamDecoder::Zstd(d) => d.get_mut(),
            StreamDecoder::Failed => return Vec::new(),
        };
        std::mem::take(&mut sink.0)
    }
}

/// A whole body decoded; None when it is identity-coded, of an unknown coding, corrupt or
/// over the limit.
pub(crate) fn decode_all(content_encoding: Option<&str>, body: &[u8]) -> Option<Vec<u8>> {
    let mut d = StreamDecoder::for_coding(content_encoding)?;
    let out = d.feed(body);
    match d {
        StreamDecoder::Failed => None,
        _ => Some(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn gzip_streams_in_pieces() {
        let text: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("<p>{i}</p>").into_bytes())
            .collect();
        let z = gzip(&text);
        let mut d = StreamDecoder::for_coding(Some("gzip")).unwrap();
        let mut out = Vec::new();
        for piece in z.chunks(100) {
            out.extend(d.feed(piece));
        }
        assert_eq!(out, text);
        assert_eq!(decode_all(Some("GZIP"), &z).unwrap(), text);
    }

    #[test]
    fn br_zstd_deflate_round_trip() {
        let text = b"body { background: url(/a.gif) } ".repeat(200);
        let mut br = Vec::new();
        brotli::BrotliCompress(&mut &text[..], &mut br, &Default::default()).unwrap();
        assert_eq!(decode_all(Some("br"), &br).unwrap(), text);
        let z = zstd::encode_all(&text[..], 3).unwrap();
        assert_eq!(decode_all(Some("zstd"), &z).unwrap(), text);
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&text).unwrap();
        assert_eq!(
            decode_all(Some("deflate"), &e.finish().unwrap()).unwrap(),
            text
        );
    }

    #[test]
    fn identity_unknown_corrupt_and_bombs() {
        assert!(decode_all(None, b"x").is_none());
        assert!(decode_all(Some("identity"), b"x").is_none());
        assert!(decode_all(Some("gzip"), b"not gzip at all").is_none());
        // 100 MB of zeros: stops at the limit.
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..100 {
            e.write_all(&zeros).unwrap();
        }
        let bomb = e.finish().unwrap();
        assert!(decode_all(Some("gzip"), &bomb).is_none());
    }
}
