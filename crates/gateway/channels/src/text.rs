//! Reply text for platforms: long replies split on boundaries, and Markdown rendered to the
//! HTML chat clients show, with nothing of the model's own HTML passed through.

use pulldown_cmark::CowStr;
use pulldown_cmark::Event;
use pulldown_cmark::Options;
use pulldown_cmark::Parser;
use pulldown_cmark::Tag;
use pulldown_cmark::TagEnd;

/// Splits `text` into parts of at most `max_chars` characters, each cut at the last paragraph
/// break, else line break, else sentence end, else space before the limit, and only as a last
/// resort inside a word. Parts are trimmed of the whitespace at the cut; none is empty.
#[must_use]
pub fn split(text: &str, max_chars: usize) -> Vec<String> {
    let max_chars = max_chars.max(1);
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let Some((limit, _)) = rest.char_indices().nth(max_chars) else {
            parts.push(rest.to_owned());
            break;
        };
        let window = &rest[..limit];
        let cut = ["\n\n", "\n", ". ", "! ", "? ", " "]
            .iter()
            .find_map(|boundary| {
                window
                    .rfind(boundary)
                    .filter(|at| *at > 0)
                    .map(|at| at + boundary.len())
            })
            .unwrap_or(limit);
        parts.push(rest[..cut].trim_end().to_owned());
        rest = rest[cut..].trim_start();
    }
    parts.retain(|part| !part.is_empty());
    parts
}

/// Whether a link target may be shown as a link: web and mail links and Matrix permalinks.
fn safe_url(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    ["https://", "http://", "mailto:"]
        .iter()
        .any(|scheme| lower.starts_with(scheme))
}

/// Renders Markdown to HTML for a chat client. Raw HTML in the text is shown as text, images
/// become links, and a link whose target is not `http`, `https` or `mailto` keeps only its text.
#[must_use]
pub fn markdown_to_html(markdown: &str) -> String {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TABLES);
    let mut dropped_links = 0_usize;
    let events = Parser::new_ext(markdown, options).filter_map(|event| match event {
        Event::Html(html) | Event::InlineHtml(html) => Some(Event::Text(html)),
        Event::Start(Tag::Link { dest_url, .. }) if !safe_url(&dest_url) => {
            dropped_links += 1;
            None
        }
        Event::End(TagEnd::Link) if dropped_links > 0 => {
            dropped_links -= 1;
            None
        }
        Event::Start(Tag::Image { dest_url, .. }) => Some(Event::Text(CowStr::from(format!(
            "[image: {}] ",
            if safe_url(&dest_url) { &dest_url } else { "" }
        )))),
        Event::End(TagEnd::Image) => None,
        other => Some(other),
    });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events);
    html.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reply_splits_on_the_best_boundary_and_loses_nothing() {
        let text = "First paragraph here.\n\nSecond one is a bit longer. It has two sentences.";
        let parts = split(text, 30);
        assert_eq!(parts[0], "First paragraph here.");
        assert!(
            parts.iter().all(|part| part.chars().count() <= 30),
            "{parts:?}"
        );
        let joined: String = parts.concat();
        let squeezed = |s: &str| s.split_whitespace().collect::<String>();
        assert_eq!(squeezed(&joined), squeezed(text));
        // No boundary at all: cut inside the word, on a character boundary.
        let word = "é".repeat(25);
        let parts = split(&word, 10);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts.concat(), word);
        assert_eq!(split("short", 100), vec!["short"]);
        assert!(split("   ", 10).is_empty());
    }

    #[test]
    fn markdown_renders_and_model_html_never_passes_through() {
        assert_eq!(
            markdown_to_html("**bold** and `code`"),
            "<p><strong>bold</strong> and <code>code</code></p>"
        );
        let hostile =
            markdown_to_html("<script>alert(1)</script>\n\nhi <img src=x onerror=alert(1)>");
        assert!(
            !hostile.contains("<script") && !hostile.contains("<img"),
            "{hostile}"
        );
        assert!(hostile.contains("&lt;script&gt;"), "{hostile}");
        let link = markdown_to_html("[click](javascript:alert(1)) [ok](https://example.com)");
        assert!(!link.contains("javascript"), "{link}");
        assert!(
            link.contains("<a href=\"https://example.com\">ok</a>"),
            "{link}"
        );
        let image = markdown_to_html("![alt](https://example.com/x.png)");
        assert!(!image.contains("<img"), "{image}");
    }
}
