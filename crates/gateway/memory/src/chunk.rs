//! Line-based chunking: about 400 tokens per chunk with 80 tokens of overlap, counted at 4
//! characters per token (1,600 and 320 characters), each chunk with its 1-based line range.

/// How files are cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSettings {
    /// The target size of a chunk, in tokens.
    pub tokens: usize,
    /// How many tokens a chunk repeats from the end of the previous one.
    pub overlap: usize,
}

/// Characters per token, for converting the settings to sizes.
pub const CHARS_PER_TOKEN: usize = 4;

impl Default for ChunkSettings {
    /// 400 tokens with 80 of overlap.
    fn default() -> Self {
        Self {
            tokens: 400,
            overlap: 80,
        }
    }
}

impl ChunkSettings {
    /// Returns a stable text naming these settings, part of the index identity.
    pub fn identity(&self) -> String {
        format!("lines-v1:{}:{}", self.tokens, self.overlap)
    }
}

/// One chunk of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The first line, 1-based.
    pub start_line: u32,
    /// The last line, 1-based and inclusive.
    pub end_line: u32,
    /// The lines, joined with `\n`.
    pub text: String,
}

/// Cuts `text` into chunks of whole lines. A chunk ends before the line that would take it past
/// the size; the next one starts with the last lines that fit in the overlap. A single line
/// longer than a chunk becomes a chunk of its own, cut at character boundaries.
pub fn chunk_lines(text: &str, settings: ChunkSettings) -> Vec<Chunk> {
    let max_chars = (settings.tokens * CHARS_PER_TOKEN).max(1);
    let overlap_chars = (settings.overlap * CHARS_PER_TOKEN).min(max_chars / 2);
    let lines: Vec<&str> = text.lines().collect();
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < lines.len() {
        let mut end = start;
        let mut size = 0;
        while end < lines.len() {
            let add = lines[end].chars().count() + usize::from(end > start);
            if end > start && size + add > max_chars {
                break;
            }
            size += add;
            end += 1;
        }
        let text = lines[start..end].join("\n");
        if text.trim().is_empty() {
            start = end;
            continue;
        }
        for piece in split_long(&text, max_chars) {
            chunks.push(Chunk {
                start_line: line_no(start),
                end_line: line_no(end - 1),
                text: piece,
            });
        }
        if end >= lines.len() {
            break;
        }
        // Step back over whole lines that fit in the overlap, always moving forward.
        let mut next = end;
        let mut kept = 0;
        while next > start + 1 {
            let add = lines[next - 1].chars().count() + 1;
            if kept + add > overlap_chars {
                break;
            }
            kept += add;
            next -= 1;
        }
        start = next;
    }
    chunks
}

fn line_no(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

fn split_long(text: &str, max_chars: usize) -> Vec<String> {
    if text.chars().count() <= max_chars {
        return vec![text.to_owned()];
    }
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(max_chars)
        .map(|piece| piece.iter().collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> ChunkSettings {
        // 40 characters per chunk, 16 of overlap.
        ChunkSettings {
            tokens: 10,
            overlap: 4,
        }
    }

    #[test]
    fn chunks_keep_line_ranges_and_overlap() {
        let text = (1..=12)
            .map(|n| format!("line {n:02} text"))
            .collect::<Vec<_>>()
            .join("\n");
        let chunks = chunk_lines(&text, small());
        // Each line is 12 chars; three fit in 40 (12+13+13), and the 16-char overlap repeats the
        // last one (13 with its newline).
        let ranges: Vec<(u32, u32)> = chunks.iter().map(|c| (c.start_line, c.end_line)).collect();
        assert_eq!(
            ranges,
            vec![(1, 3), (3, 5), (5, 7), (7, 9), (9, 11), (11, 12)]
        );
        assert_eq!(chunks[0].text, "line 01 text\nline 02 text\nline 03 text");
        for chunk in &chunks {
            assert!(chunk.text.chars().count() <= 40, "{chunk:?}");
        }
    }

    #[test]
    fn a_long_line_is_cut_and_empty_text_gives_nothing() {
        let long = "x".repeat(100);
        let chunks = chunk_lines(&long, small());
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| (c.start_line, c.end_line) == (1, 1)));
        assert!(chunk_lines("", small()).is_empty());
        assert!(chunk_lines("\n\n  \n", small()).is_empty());
    }

    #[test]
    fn the_default_is_400_tokens_with_80_overlap() {
        let settings = ChunkSettings::default();
        assert_eq!(settings.tokens * CHARS_PER_TOKEN, 1600);
        assert_eq!(settings.overlap * CHARS_PER_TOKEN, 320);
        assert_eq!(settings.identity(), "lines-v1:400:80");
    }
}
