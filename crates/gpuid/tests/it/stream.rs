//! The streaming parse (what the collector runs over exec frames) gives
//! exactly what the whole-document parse gives, for every capture and every
//! way of cutting it into frames, mutated captures and tight caps included.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use gpuid::smi::{self, DocumentCheck, Limits, ParseError, SmiReport};
use proptest::prelude::*;
use tokio::io::{AsyncBufRead, AsyncRead, ReadBuf};

use crate::fixtures::{all_captures, capture};

/// A document arriving in frames of the given sizes (cycled), fed to the
/// parser the way the exec client feeds it: each frame through the check
/// first, and nothing more after the first bad byte.
struct Frames<'a> {
    rest: &'a [u8],
    sizes: Vec<usize>,
    next_size: usize,
    check: DocumentCheck,
    feeding: bool,
    unread: &'a [u8],
}

impl<'a> Frames<'a> {
    fn new(document: &'a [u8], sizes: Vec<usize>, limits: Limits) -> Self {
        Frames {
            rest: document,
            sizes,
            next_size: 0,
            check: DocumentCheck::new(limits),
            feeding: true,
            unread: &[],
        }
    }

    fn next_frame(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let size = self.sizes[self.next_size % self.sizes.len()].max(1);
        self.next_size += 1;
        let (frame, rest) = self.rest.split_at(size.min(self.rest.len()));
        self.rest = rest;
        Some(frame)
    }

    /// What the exec client does after the parse: the rest is checked only.
    fn drain(mut self) -> DocumentCheck {
        while let Some(frame) = self.next_frame() {
            self.check.accept(frame);
        }
        self.check
    }
}

impl AsyncBufRead for Frames<'_> {
    fn poll_fill_buf(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        while this.unread.is_empty() && this.feeding {
            let Some(frame) = this.next_frame() else {
                break;
            };
            if this.check.accept(frame) {
                this.unread = frame;
            } else {
                this.feeding = false;
            }
        }
        Poll::Ready(Ok(this.unread))
    }

    fn consume(self: Pin<&mut Self>, amount: usize) {
        let this = self.get_mut();
        this.unread = &this.unread[amount..];
    }
}

impl AsyncRead for Frames<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Poll::Ready(available) = self.as_mut().poll_fill_buf(cx)? else {
            return Poll::Pending;
        };
        let count = available.len().min(buffer.remaining());
        buffer.put_slice(&available[..count]);
        self.consume(count);
        Poll::Ready(Ok(()))
    }
}

fn streamed(document: &[u8], sizes: Vec<usize>, limits: Limits) -> Result<SmiReport, ParseError> {
    let mut frames = Frames::new(document, sizes, limits);
    let parsed = futures::executor::block_on(smi::parse_async(&mut frames, limits));
    frames.drain().verdict(parsed)
}

fn assert_same(document: &[u8], sizes: Vec<usize>, limits: Limits) {
    let whole = format!("{:?}", smi::parse_with_limits(document, limits));
    let described = format!("{sizes:?}");
    let streamed = format!("{:?}", streamed(document, sizes, limits));
    assert_eq!(
        streamed, whole,
        "frames of {described} differ from the whole document"
    );
}

#[test]
fn every_capture_in_kube_frames_and_in_tiny_pieces_parses_as_the_whole_document() {
    for (_name, document) in all_captures() {
        for sizes in [vec![32 * 1024], vec![1], vec![7, 1, 3], vec![4096, 13]] {
            assert_same(&document, sizes, Limits::DEFAULT);
        }
    }
}

#[test]
fn errors_and_their_positions_match_wherever_the_frames_are_cut() {
    let good = capture("simulated/a100-healthy.xml");
    let mut control = good.clone();
    control[good.len() / 2] = 0x01;
    let mut invalid = good.clone();
    invalid[100] = 0xFF;
    let mut both = invalid.clone();
    both[good.len() - 40] = 0x02;
    let truncated = good[..good.len() - 30].to_vec();
    let failure =
        b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.".to_vec();
    let tight = Limits {
        max_input_bytes: good.len() - 1,
        ..Limits::DEFAULT
    };
    for (document, limits) in [
        (&control, Limits::DEFAULT),
        (&invalid, Limits::DEFAULT),
        (&both, Limits::DEFAULT),
        (&truncated, Limits::DEFAULT),
        (&failure, Limits::DEFAULT),
        (&good, tight),
    ] {
        let whole = smi::parse_with_limits(document, limits);
        assert!(whole.is_err(), "each of these documents is refused");
        for sizes in [vec![1], vec![5, 2], vec![32 * 1024], vec![99]] {
            assert_same(document, sizes, limits);
        }
    }
}

/// Mutations as in the fuzz module: bytes flipped (bad UTF-8 and control
/// characters among them), cuts and copies.
fn mutate(
    mut document: Vec<u8>,
    flips: &[(prop::sample::Index, u8)],
    cut: Option<prop::sample::Index>,
) -> Vec<u8> {
    for (at, byte) in flips {
        let at = at.index(document.len());
        document[at] = *byte;
    }
    if let Some(cut) = cut {
        document.truncate(cut.index(document.len()));
    }
    document
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mutated_captures_in_random_frames_parse_as_the_whole_document(
        which in prop::sample::select(&["simulated/a100-healthy.xml", "hardware/l40s.xml", "simulated/gb200-lost.xml"][..]),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        sizes in prop::collection::vec(1usize..5000, 1..5),
        max_field_bytes in prop::sample::select(&[8usize, 64, Limits::DEFAULT.max_field_bytes][..]),
    ) {
        let document = mutate(capture(which), &flips, cut);
        let limits = Limits { max_field_bytes, ..Limits::DEFAULT };
        assert_same(&document, sizes, limits);
    }
}
