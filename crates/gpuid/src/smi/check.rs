//! The whole-document checks of [`super::parse_with_limits`] (size, control
//! characters, UTF-8) for a document that arrives in pieces.
//!
//! The streaming parser decodes only the fields it keeps, so a bad byte in a
//! skipped element would pass unseen; every byte goes through this check
//! instead, and its verdict comes first, exactly as the whole-document
//! parse checks before it parses.

use super::{Limits, ParseError, SmiReport};

/// The longest UTF-8 sequence, so the most a piece can leave unfinished.
const UTF8_MAX: usize = 4;

/// Checks a document piece by piece, remembering the first problem of each
/// kind at its position in the whole document.
#[derive(Debug)]
pub struct DocumentCheck {
    limit: usize,
    seen: u64,
    too_large: bool,
    control: Option<(u64, u8)>,
    /// Position of the first invalid UTF-8 sequence.
    invalid_utf8: Option<u64>,
    /// The start of a UTF-8 sequence the last piece cut short, and where it began.
    carry: [u8; UTF8_MAX],
    carry_len: usize,
    carry_at: u64,
}

impl DocumentCheck {
    pub fn new(limits: Limits) -> Self {
        DocumentCheck {
            limit: limits.max_input_bytes,
            seen: 0,
            too_large: false,
            control: None,
            invalid_utf8: None,
            carry: [0; UTF8_MAX],
            carry_len: 0,
            carry_at: 0,
        }
    }

    /// Checks the next piece. `true` while the document so far is clean, so
    /// the piece may go on to the parser; after the first `false` the rest is
    /// still worth checking (a control character after invalid UTF-8 is the
    /// error the whole-document parse reports) but not worth parsing.
    pub fn accept(&mut self, piece: &[u8]) -> bool {
        let start = self.seen;
        self.seen = self.seen.saturating_add(piece.len() as u64);
        if self.seen > self.limit as u64 {
            self.too_large = true;
        }
        if self.control.is_none()
            && let Some(offset) = piece
                .iter()
                .position(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
        {
            self.control = Some((start + offset as u64, piece[offset]));
        }
        if self.invalid_utf8.is_none() {
            self.check_utf8(piece, start);
        }
        self.is_clean()
    }

    /// Whether the document is too large already: the reader can stop.
    pub fn too_large(&self) -> bool {
        self.too_large
    }

    fn is_clean(&self) -> bool {
        !self.too_large && self.control.is_none() && self.invalid_utf8.is_none()
    }

    fn check_utf8(&mut self, piece: &[u8], start: u64) {
        let mut rest = piece;
        let mut at = start;
        if self.carry_len > 0 {
            let needed = utf8_sequence_len(self.carry[0]).saturating_sub(self.carry_len);
            let take = needed.min(rest.len());
            self.carry[self.carry_len..self.carry_len + take].copy_from_slice(&rest[..take]);
            self.carry_len += take;
            rest = &rest[take..];
            at += take as u64;
            if take < needed {
                // Still short: the next piece may finish it.
                if self.sequence_is_invalid_so_far() {
                    self.invalid_utf8 = Some(self.carry_at);
                }
                return;
            }
            let carried = self.carry_len;
            self.carry_len = 0;
            if std::str::from_utf8(&self.carry[..carried]).is_err() {
                self.invalid_utf8 = Some(self.carry_at);
                return;
            }
        }
        match std::str::from_utf8(rest) {
            Ok(_) => {}
            Err(error) => {
                let valid = error.valid_up_to();
                match error.error_len() {
                    Some(_) => self.invalid_utf8 = Some(at + valid as u64),
                    None => {
                        // A sequence cut by the end of the piece; at most 3
                        // bytes, or `error_len` would have said invalid.
                        let tail = &rest[valid..];
                        self.carry[..tail.len()].copy_from_slice(tail);
                        self.carry_len = tail.len();
                        self.carry_at = at + valid as u64;
                    }
                }
            }
        }
    }

    /// A carried prefix that cannot start any valid sequence (say, a lead
    /// byte followed by a byte that is not a continuation).
    fn sequence_is_invalid_so_far(&self) -> bool {
        match std::str::from_utf8(&self.carry[..self.carry_len]) {
            Ok(_) => false,
            Err(error) => error.error_len().is_some(),
        }
    }

    /// The verdict on the whole document, in the order the whole-document
    /// parse checks: size, then control characters, then UTF-8 (a sequence
    /// still unfinished at the end is invalid).
    pub fn finish(self) -> Result<(), ParseError> {
        if self.too_large {
            return Err(ParseError::InputTooLarge { limit: self.limit });
        }
        if let Some((position, byte)) = self.control {
            return Err(ParseError::ControlCharacter { position, byte });
        }
        if let Some(position) = self.invalid_utf8 {
            return Err(ParseError::InvalidUtf8 { position });
        }
        if self.carry_len > 0 {
            return Err(ParseError::InvalidUtf8 {
                position: self.carry_at,
            });
        }
        Ok(())
    }

    /// The document's result: this check's verdict first, then the parse's.
    pub fn verdict(self, parsed: Result<SmiReport, ParseError>) -> Result<SmiReport, ParseError> {
        self.finish()?;
        parsed
    }
}

/// The length a UTF-8 lead byte announces (1 for anything that is not a
/// multi-byte lead, so a stray byte is judged on its own).
fn utf8_sequence_len(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> Result<(), ParseError> {
        let mut check = DocumentCheck::new(Limits::DEFAULT);
        check.accept(bytes);
        check.finish()
    }

    fn in_pieces(bytes: &[u8], size: usize) -> Result<(), ParseError> {
        let mut check = DocumentCheck::new(Limits::DEFAULT);
        for piece in bytes.chunks(size) {
            check.accept(piece);
        }
        check.finish()
    }

    fn same(left: Result<(), ParseError>, right: Result<(), ParseError>) -> bool {
        format!("{left:?}") == format!("{right:?}")
    }

    #[test]
    fn every_split_of_a_multibyte_text_agrees_with_the_whole_check() {
        let texts: [&[u8]; 7] = [
            "GPU «Ω» 日本 𝄞 end".as_bytes(),
            b"ab\xE6\x97",             // cut short at the end
            b"ab\xE6\x41\x42cd",       // a lead byte followed by ASCII
            b"x\xF0\x9D\x84\x9Ey\xFF", // valid four-byte, then an invalid byte
            b"ok\x01then\xC3",         // control character before bad UTF-8
            b"\xC3\xA9\xC3",
            b"plain ascii",
        ];
        for text in texts {
            let expected = whole(text);
            for size in 1..=text.len() {
                let got = in_pieces(text, size);
                assert!(
                    same(got, whole(text)),
                    "{text:?} in pieces of {size}: {:?}, whole: {expected:?}",
                    in_pieces(text, size)
                );
            }
        }
    }

    #[test]
    fn positions_and_precedence_follow_the_whole_document_check() {
        assert!(matches!(
            in_pieces(b"ab\xE6\x41", 3),
            Err(ParseError::InvalidUtf8 { position: 2 })
        ));
        assert!(matches!(
            in_pieces(b"\xFFab\x02", 2),
            Err(ParseError::ControlCharacter {
                position: 3,
                byte: 2
            })
        ));
        let limits = Limits {
            max_input_bytes: 4,
            ..Limits::DEFAULT
        };
        let mut check = DocumentCheck::new(limits);
        assert!(check.accept(b"abcd"));
        assert!(!check.accept(b"\x01"));
        assert!(check.too_large());
        assert!(matches!(
            check.finish(),
            Err(ParseError::InputTooLarge { limit: 4 })
        ));
    }
}
