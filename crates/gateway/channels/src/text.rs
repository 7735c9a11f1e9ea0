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

/// Splits Markdown `text` as [`split`] does, and keeps fenced code blocks whole in each part: a
/// part cut inside a fence is closed with one, and the next part opens it again (with its info
/// string), so each part renders on its own as the whole would. A part may pass `max_chars` by
/// the length of those fence lines.
#[must_use]
pub fn split_markdown(text: &str, max_chars: usize) -> Vec<String> {
    let mut parts = split(text, max_chars);
    let mut open: Option<String> = None;
    for part in &mut parts {
        if let Some(fence) = &open {
            *part = format!("{fence}\n{part}");
        }
        open = None;
        for line in part.lines() {
            let trimmed = line.trim_start();
            if let Some(info) = trimmed.strip_prefix("```") {
                open = match open {
                    Some(_) => None,
                    None => Some(format!("```{}", info.trim())),
                };
            }
        }
        if open.is_some() {
            part.push_str("\n```");
        }
    }
    parts
}

/// How one chat platform marks text up: what [`render`] writes for each piece of Markdown.
struct Dialect {
    bold: (&'static str, &'static str),
    italic: (&'static str, &'static str),
    strike: (&'static str, &'static str),
    code: (&'static str, &'static str),
    quote: (&'static str, &'static str),
    /// Opens a code block in `language` (already reduced to a safe alphabet, maybe empty).
    pre_open: fn(&str) -> String,
    pre_close: &'static str,
    /// Opens a link to `url` (escaped); its text follows, then `link_close`.
    link_open: fn(&str) -> String,
    link_close: &'static str,
    /// Escapes text and URLs.
    escape: fn(&str) -> String,
}

/// Telegram's HTML parse mode: only the tags the Bot API takes.
const TELEGRAM: Dialect = Dialect {
    bold: ("<b>", "</b>"),
    italic: ("<i>", "</i>"),
    strike: ("<s>", "</s>"),
    code: ("<code>", "</code>"),
    quote: ("<blockquote>", "</blockquote>"),
    pre_open: |language| match language {
        "" => String::from("<pre><code>"),
        language => format!("<pre><code class=\"language-{language}\">"),
    },
    pre_close: "</code></pre>",
    link_open: |url| format!("<a href=\"{url}\">"),
    link_close: "</a>",
    escape: escape_html,
};

/// Slack's `mrkdwn`.
const SLACK: Dialect = Dialect {
    bold: ("*", "*"),
    italic: ("_", "_"),
    strike: ("~", "~"),
    code: ("`", "`"),
    quote: ("> ", ""),
    pre_open: |_| String::from("```\n"),
    pre_close: "\n```",
    link_open: |url| format!("<{url}|"),
    link_close: ">",
    escape: escape_mrkdwn,
};

/// Telegram's HTML for `markdown` and the length of its visible text in UTF-16 code units (how
/// the Bot API counts its 4,096-character bound). Only the tags the Bot API's HTML parse mode
/// takes are written (`b`, `i`, `s`, `code`, `pre`, `a`, `blockquote`); paragraphs, headings,
/// lists and tables become text; `&`, `<`, `>` and `"` are escaped everywhere, so the model's own
/// HTML shows as text.
#[must_use]
pub fn markdown_to_telegram_html(markdown: &str) -> (String, usize) {
    render(markdown, &TELEGRAM)
}

/// Slack's `mrkdwn` for `markdown`: `*bold*`, `_italic_`, `~strike~`, `` `code` ``, code blocks,
/// `<url|text>` links (only `http`, `https` and `mailto`), quotes; headings in bold, lists as
/// lines; `&`, `<` and `>` escaped everywhere, so no text becomes a mention or a link by itself.
#[must_use]
pub fn markdown_to_mrkdwn(markdown: &str) -> String {
    render(markdown, &SLACK).0
}

/// Renders `markdown` in `dialect`; returns the text and its visible length in UTF-16 code
/// units (the markup left out).
fn render(markdown: &str, dialect: &Dialect) -> (String, usize) {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TABLES);
    let mut out = Marked {
        escape: Some(dialect.escape),
        ..Marked::default()
    };
    let mut lists: Vec<Option<u64>> = Vec::new();
    let mut dropped_links = 0_usize;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Paragraph | Tag::Table(_) | Tag::HtmlBlock => out.block(),
                Tag::Heading { .. } => {
                    out.block();
                    out.tag(dialect.bold.0);
                }
                Tag::BlockQuote(_) => {
                    out.block();
                    out.tag(dialect.quote.0);
                }
                Tag::CodeBlock(kind) => {
                    out.block();
                    let language: String = match kind {
                        pulldown_cmark::CodeBlockKind::Fenced(info) => info
                            .split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .chars()
                            .filter(|c| {
                                c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_' | '#')
                            })
                            .collect(),
                        pulldown_cmark::CodeBlockKind::Indented => String::new(),
                    };
                    out.tag(&(dialect.pre_open)(&language));
                }
                Tag::List(start) => {
                    match lists.is_empty() {
                        true => out.block(),
                        false => out.line(),
                    }
                    lists.push(start);
                }
                Tag::Item => {
                    out.line();
                    let depth = lists.len().saturating_sub(1);
                    out.text(&"  ".repeat(depth));
                    match lists.last_mut() {
                        Some(Some(number)) => {
                            out.text(&format!("{number}. "));
                            *number += 1;
                        }
                        _ => out.text("• "),
                    }
                }
                Tag::TableRow | Tag::TableHead => out.line(),
                Tag::Emphasis => out.tag(dialect.italic.0),
                Tag::Strong => out.tag(dialect.bold.0),
                Tag::Strikethrough => out.tag(dialect.strike.0),
                Tag::Link { dest_url, .. } if safe_url(&dest_url) => {
                    out.tag(&(dialect.link_open)(&(dialect.escape)(&dest_url)));
                }
                Tag::Link { .. } => dropped_links += 1,
                Tag::Image { dest_url, .. } => out.text(&format!(
                    "[image: {}] ",
                    if safe_url(&dest_url) { &dest_url } else { "" }
                )),
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Heading(_) => out.tag(dialect.bold.1),
                TagEnd::BlockQuote(_) => out.tag(dialect.quote.1),
                TagEnd::CodeBlock => {
                    out.trim_end();
                    out.tag(dialect.pre_close);
                }
                TagEnd::List(_) => {
                    lists.pop();
                }
                TagEnd::TableCell => out.text(" | "),
                TagEnd::Emphasis => out.tag(dialect.italic.1),
                TagEnd::Strong => out.tag(dialect.bold.1),
                TagEnd::Strikethrough => out.tag(dialect.strike.1),
                TagEnd::Link if dropped_links > 0 => dropped_links -= 1,
                TagEnd::Link => out.tag(dialect.link_close),
                _ => {}
            },
            Event::Text(text) | Event::Html(text) | Event::InlineHtml(text) => out.text(&text),
            Event::Code(code) => {
                out.tag(dialect.code.0);
                out.text(&code);
                out.tag(dialect.code.1);
            }
            Event::SoftBreak | Event::HardBreak => out.text("\n"),
            Event::Rule => {
                out.block();
                out.text("———");
            }
            _ => {}
        }
    }
    out.trim_end();
    (out.marked, out.visible)
}

/// Marked-up text being written, with its visible length counted as it grows.
#[derive(Default)]
struct Marked {
    marked: String,
    /// UTF-16 code units of visible text.
    visible: usize,
    /// Visible text written so far ends with this many newlines.
    newlines: usize,
    /// Whether any visible text was written.
    started: bool,
    /// The dialect's escaping.
    escape: Option<fn(&str) -> String>,
}

impl Marked {
    fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.escape {
            Some(escape) => self.marked.push_str(&escape(text)),
            None => self.marked.push_str(text),
        }
        self.visible += text.encode_utf16().count();
        self.started = true;
        let trailing = text.chars().rev().take_while(|c| *c == '\n').count();
        self.newlines = match trailing == text.chars().count() {
            true => self.newlines + trailing,
            false => trailing,
        };
    }

    fn tag(&mut self, tag: &str) {
        self.marked.push_str(tag);
    }

    /// Starts a line, unless one is started.
    fn line(&mut self) {
        if self.started && self.newlines == 0 {
            self.text("\n");
        }
    }

    /// Starts a block: a blank line after what came before.
    fn block(&mut self) {
        if self.started {
            while self.newlines < 2 {
                self.text("\n");
            }
        }
    }

    /// Drops trailing newlines (inside a code block, before its end).
    fn trim_end(&mut self) {
        while self.newlines > 0 && self.marked.ends_with('\n') {
            self.marked.pop();
            self.visible -= 1;
            self.newlines -= 1;
        }
    }
}

/// Escapes `&`, `<`, `>` and `"` for HTML text and attribute values.
fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => escaped.push_str("&quot;"),
            other => push_escaped(&mut escaped, other),
        }
    }
    escaped
}

/// Escapes `&`, `<` and `>`, as Slack asks of text it should not read as markup.
fn escape_mrkdwn(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut escaped, c);
    }
    escaped
}

fn push_escaped(escaped: &mut String, c: char) {
    match c {
        '&' => escaped.push_str("&amp;"),
        '<' => escaped.push_str("&lt;"),
        '>' => escaped.push_str("&gt;"),
        other => escaped.push(other),
    }
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
    fn a_split_inside_a_code_fence_closes_and_reopens_it() {
        let code: String = (0..40).map(|n| format!("line {n}\n")).collect();
        let text = format!("Intro.\n\n```rust\n{code}```\n\nAfter.");
        let parts = split_markdown(&text, 120);
        assert!(parts.len() > 2, "{parts:?}");
        for part in &parts {
            let fences = part.lines().filter(|line| line.starts_with("```")).count();
            assert_eq!(fences % 2, 0, "{part}");
        }
        assert!(parts[1].starts_with("```rust\n"), "{}", parts[1]);
    }

    #[test]
    fn telegram_html_uses_only_its_tags_and_counts_utf16() {
        let (html, visible) = markdown_to_telegram_html(
            "# Title\n\n**bold** _it_ ~~s~~ `x<y` [ok](https://example.com) [bad](javascript:x)\n\n- one\n- two\n\n```sh\necho <hi> & bye\n```\n\n<p>raw</p> 😀",
        );
        assert_eq!(
            html,
            "<b>Title</b>\n\n<b>bold</b> <i>it</i> <s>s</s> <code>x&lt;y</code> <a href=\"https://example.com\">ok</a> bad\n\n• one\n• two\n\n<pre><code class=\"language-sh\">echo &lt;hi&gt; &amp; bye</code></pre>\n\n&lt;p&gt;raw&lt;/p&gt; 😀"
        );
        let text =
            "Title\n\nbold it s x<y ok bad\n\n• one\n• two\n\necho <hi> & bye\n\n<p>raw</p> 😀";
        assert_eq!(visible, text.encode_utf16().count());
    }

    #[test]
    fn mrkdwn_escapes_and_marks_up() {
        assert_eq!(
            markdown_to_mrkdwn(
                "# Plan\n\n**bold** _it_ ~~gone~~ `a<b` [docs](https://example.com/?a=1&b=2) [x](javascript:y)\n\n- <@U123> & <!channel>\n\n```rust\nlet x = 1 > 0;\n```"
            ),
            "*Plan*\n\n*bold* _it_ ~gone~ `a&lt;b` <https://example.com/?a=1&amp;b=2|docs> x\n\n• &lt;@U123&gt; &amp; &lt;!channel&gt;\n\n```\nlet x = 1 &gt; 0;\n```"
        );
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
