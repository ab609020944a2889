//! One discipline for the operator's outbound HTTP: Flink's REST API
//! ([`FlinkRest`](crate::engine::flink::rest::FlinkRest)) and our runtime's control API
//! ([`HttpControl`](crate::engine::runtime::control::HttpControl)). Both talk to pods that run a tenant's image,
//! and one operator serves every tenant, so whatever such a pod answers is hostile until read:
//!
//! - redirects are never followed ([`client`]): a 307 keeps method and body, so following it
//!   would make the operator POST wherever the tenant points (another tenant's JobManager); a 3xx
//!   is an error naming its status ([`refusal`]);
//! - connect and total timeouts; the total covers the body, so a server that drips bytes ends too;
//! - answers are read up to a cap ([`read_capped`]): a larger announced length is refused before
//!   reading, a stream without one as soon as it passes the cap;
//! - remote text (error bodies, failure causes, exception strings) goes through
//!   [`sanitize_remote`] before it can reach an error, a status or an event.

use std::fmt;
use std::time::Duration;

use reqwest::{Client, Response};

/// The most read of one answer. A status or a Flink REST answer is a few KiB; a pod that sends
/// more is broken or hostile.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;
/// The most read of an error answer (only its start is quoted).
pub const MAX_ERROR_BYTES: usize = 4 << 10;
/// The most characters of remote text quoted in an error, a status field or an event.
pub const QUOTE_CHARS: usize = 500;

/// An HTTP client that never follows a redirect and gives up on connecting after `connect` and on
/// the whole exchange, body included, after `total`.
pub fn client(connect: Duration, total: Duration) -> reqwest::Result<Client> {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        // pod addresses are reached directly, never through a proxy from the environment
        .no_proxy()
        .connect_timeout(connect.min(total))
        .timeout(total)
        .build()
}

/// Why an answer's body was not read.
#[derive(Debug)]
pub enum BodyError {
    /// More than `max` bytes were announced or sent.
    TooLarge { max: usize },
    /// The connection failed or timed out while reading.
    Read(reqwest::Error),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TooLarge { max } => write!(f, "the answer exceeds {max} bytes"),
            BodyError::Read(e) => write!(f, "reading the answer: {}", describe(e)),
        }
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BodyError::TooLarge { .. } => None,
            BodyError::Read(e) => Some(e),
        }
    }
}

/// The body of `resp`, refused as soon as it exceeds `max` bytes: an announced length at once,
/// a streamed body when the chunk that passes the cap arrives (so at most `max` bytes and one
/// chunk are ever held).
pub async fn read_capped(mut resp: Response, max: usize) -> Result<Vec<u8>, BodyError> {
    if resp
        .content_length()
        .is_some_and(|n| n > u64::try_from(max).unwrap_or(u64::MAX))
    {
        return Err(BodyError::TooLarge { max });
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(BodyError::Read)? {
        if body.len().saturating_add(chunk.len()) > max {
            return Err(BodyError::TooLarge { max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What a refused (non-2xx) answer says, raw: the caller extracts what it knows of the format and
/// then sanitises it. A redirect is named and neither read nor followed; an error body is read up
/// to [`MAX_ERROR_BYTES`], and one too large to quote is quoted by its size.
pub async fn refusal(resp: Response) -> String {
    if resp.status().is_redirection() {
        return "redirect not followed (the operator talks only to the pod it addressed)".into();
    }
    match read_capped(resp, MAX_ERROR_BYTES).await {
        Ok(body) => String::from_utf8_lossy(&body).into_owned(),
        Err(e) => e.to_string(),
    }
}

/// A reqwest error with its causes: reqwest's own text names neither a timeout nor a refused
/// connection ("error sending request for url (…)"), its sources do.
pub fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `text` from a tenant's pod, fit to quote in an error, a status field or an event: terminal
/// escape sequences and control characters removed, invisible direction and width marks removed,
/// every run of white space (line breaks included) one space, and at most `max_chars` characters,
/// the last one an ellipsis when cut.
pub fn sanitize_remote(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut kept = 0usize;
    let mut space = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            skip_escape(&mut chars);
        } else if c.is_whitespace() {
            space = kept > 0;
        } else if !c.is_control() && !invisible(c) {
            // one more than fits tells that the text was cut
            if kept + usize::from(space) + 1 > max_chars {
                let cut = max_chars.saturating_sub(1);
                let mut shown: String = out.chars().take(cut).collect();
                shown.truncate(shown.trim_end().len());
                if max_chars > 0 {
                    shown.push('…');
                }
                return shown;
            }
            if space {
                out.push(' ');
                kept += 1;
                space = false;
            }
            out.push(c);
            kept += 1;
        }
    }
    out
}

/// Skips the rest of an escape sequence after ESC: CSI (`ESC [` … final byte), OSC and the other
/// string sequences (`ESC ]`, `P`, `X`, `^`, `_` … BEL or `ESC \`), or one character.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.next() {
        Some('[') => {
            for c in chars.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&c) {
                    break;
                }
            }
        }
        Some(']' | 'P' | 'X' | '^' | '_') => {
            while let Some(c) = chars.next() {
                if c == '\u{7}' || (c == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                    break;
                }
            }
        }
        _ => {}
    }
}

/// Format characters that reorder or hide text (bidirectional overrides, zero-width marks): a
/// status message must read as what it says.
pub(crate) fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}'
            | '\u{feff}'
    )
}
