//! Whether two borrows share a byte: [`Span`] (a range, or a strided view's progression of
//! elements) and the exact test between two of them.
//!
//! Two progressions share a byte iff their residues modulo the gcd of their periods meet
//! (Chinese remainder theorem), and then in every window of the periods' lcm; a shorter overlap
//! is walked, up to [`MAX_WALK`] elements, past which the answer is "shared".

/// How many elements the exact test walks at most before answering "shared".
pub(crate) const MAX_WALK: usize = 64;

/// The bytes of `start..end` whose offset from `start` modulo `period` is below `width`
/// (all of them when `period` is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    /// The first byte.
    pub(crate) start: usize,
    /// One past the last byte.
    pub(crate) end: usize,
    /// The distance between two element starts (0: the whole range).
    pub(crate) period: usize,
    /// The bytes of each element (below `period`; 0 when `period` is 0).
    pub(crate) width: usize,
}

impl Span {
    /// Every byte of `start..end`.
    pub(crate) const fn range(start: usize, end: usize) -> Span {
        Span {
            start,
            end,
            period: 0,
            width: 0,
        }
    }

    /// Elements of `width` bytes every `period` bytes from `start` below `end` (a range when
    /// they leave no gap).
    pub(crate) const fn strided(start: usize, end: usize, period: usize, width: usize) -> Span {
        if width >= period || width == 0 {
            return Span::range(start, end);
        }
        Span {
            start,
            end,
            period,
            width,
        }
    }

    /// Whether the span is a plain range.
    pub(crate) const fn is_range(&self) -> bool {
        self.period == 0
    }

    /// The first byte of the span at or after `x` (`x >= start`); may lie past `end`.
    fn next_byte(&self, x: usize) -> usize {
        if self.is_range() {
            return x;
        }
        let off = (x - self.start) % self.period;
        if off < self.width {
            x
        } else {
            // Past the last address: no byte of the span lies at or after `x`.
            x.saturating_add(self.period - off)
        }
    }

    /// Whether some byte of `lo..hi` (within this span's range) is in the span.
    fn meets(&self, lo: usize, hi: usize) -> bool {
        self.next_byte(lo) < hi
    }

    /// Whether the two spans share a byte (exact up to [`MAX_WALK`] elements).
    pub(crate) fn shares_byte(&self, other: &Span) -> bool {
        let lo = self.start.max(other.start);
        let hi = self.end.min(other.end);
        if lo >= hi {
            return false;
        }
        if self.is_range() {
            return other.meets(lo, hi);
        }
        if other.is_range() {
            return self.meets(lo, hi);
        }
        let g = gcd(self.period, other.period);
        // Residues modulo g: ours cover start..start+width, theirs other.start..+other.width.
        let r = (other.start % g + g - self.start % g) % g;
        if r >= self.width && g - r >= other.width {
            return false;
        }
        // A common byte exists on the integers; in every window of lcm(periods) bytes.
        let lcm = (self.period / g).checked_mul(other.period);
        if lcm.is_some_and(|l| hi - lo >= l) {
            return true;
        }
        // Walk the sparser span's elements that touch lo..hi.
        let (walk, test) = if self.period >= other.period {
            (self, other)
        } else {
            (other, self)
        };
        let first = (lo - walk.start) / walk.period;
        let mut start = walk.start + first * walk.period;
        for _ in 0..MAX_WALK {
            if start >= hi {
                return false;
            }
            let a = start.max(lo);
            let b = start.saturating_add(walk.width).min(hi);
            if a < b && test.meets(a, b) {
                return true;
            }
            // The next element would start past the last address: none is left below `hi`.
            let Some(next) = start.checked_add(walk.period) else {
                return false;
            };
            start = next;
        }
        true
    }
}

/// The greatest common divisor (`gcd(0, b) == b`).
pub(crate) const fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// Every byte of a span, enumerated.
    fn bytes(s: &Span) -> Vec<usize> {
        (s.start..s.end)
            .filter(|&x| s.is_range() || (x - s.start) % s.period < s.width)
            .collect()
    }

    fn naive(a: &Span, b: &Span) -> bool {
        let theirs = bytes(b);
        bytes(a).iter().any(|x| theirs.contains(x))
    }

    /// A small deterministic generator (no dependency).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) % n) as usize
        }
    }

    #[test]
    fn interleaved_elements_are_disjoint() {
        // z[::2] and z[1::2] of float32: 8-byte period, 4-byte elements, 4 bytes apart.
        let even = Span::strided(0x1000, 0x1000 + 15 * 8 + 4, 8, 4);
        let odd = Span::strided(0x1004, 0x1004 + 15 * 8 + 4, 8, 4);
        assert!(!even.shares_byte(&odd) && !odd.shares_byte(&even));
        // An int32 view of the bytes, and every fourth byte from the second (the probe's case).
        let words = Span::range(0x1000, 0x1040);
        let bytes_1_4 = Span::strided(0x1001, 0x1001 + 15 * 4 + 1, 4, 1);
        assert!(words.shares_byte(&bytes_1_4) && bytes_1_4.shares_byte(&words));
        // Channels of an RGB image: one byte in three, each its own.
        let r = Span::strided(0, 3 * 99 + 1, 3, 1);
        let g = Span::strided(1, 3 * 99 + 2, 3, 1);
        assert!(!r.shares_byte(&g));
        assert!(r.shares_byte(&r));
    }

    #[test]
    fn spans_at_the_top_of_the_address_space_are_decided_exactly() {
        // A producer's pointer is a claim: spans may end at the last addresses, where a step to
        // the next element or byte would overflow.
        let top = usize::MAX;
        let mut rng = Lcg(7);
        for _ in 0..5000 {
            let (pa, pb) = (2 + rng.next(23), 2 + rng.next(23));
            let (wa, wb) = (1 + rng.next(pa as u64 - 1), 1 + rng.next(pb as u64 - 1));
            let a = Span::strided(top - 60 + rng.next(50), top - rng.next(3), pa, wa);
            let b = Span::strided(top - 60 + rng.next(50), top - rng.next(3), pb, wb);
            assert_eq!(a.shares_byte(&b), naive(&a, &b), "{a:?} {b:?}");
            assert_eq!(b.shares_byte(&a), naive(&a, &b), "{b:?} {a:?}");
        }
    }

    #[test]
    fn strided_normalises_gapless_elements_to_a_range() {
        assert_eq!(Span::strided(8, 24, 4, 4), Span::range(8, 24));
        assert_eq!(Span::strided(8, 24, 4, 8), Span::range(8, 24));
        assert_eq!(Span::strided(8, 24, 0, 4), Span::range(8, 24));
        assert_eq!(Span::strided(8, 24, 4, 0), Span::range(8, 24));
        assert!(!Span::strided(8, 24, 4, 2).is_range());
    }

    #[test]
    fn short_overlaps_with_a_long_common_period_are_walked_exactly() {
        // Periods 7 and 11 (lcm 77) over a 30-byte overlap: the residue test alone says
        // "maybe"; the walk finds that no byte is common here.
        let a = Span::strided(0, 30, 7, 1); // 0, 7, 14, 21, 28
        let b = Span::strided(3, 30, 11, 1); // 3, 14, 25 -> 14 is common
        assert!(a.shares_byte(&b));
        let b = Span::strided(4, 30, 11, 1); // 4, 15, 26: none
        assert!(!a.shares_byte(&b) && !b.shares_byte(&a));
    }

    #[test]
    fn the_walk_is_bounded_and_then_conservative() {
        // Coprime periods, an overlap of many elements but shorter than their lcm.
        let p = 1 << 20;
        let a = Span::strided(0, 200 * 1009 + 1, 1009, 1);
        let b = Span::strided(1, 1 + 3 * p, p, 1);
        assert!(!naive(&a, &b));
        // More than MAX_WALK elements of the sparser (b has 3; a is walked when it is sparser).
        assert!(!a.shares_byte(&b));
        let c = Span::strided(1, 1 + 200 * 1013 + 1, 1013, 1);
        assert!(!naive(&a, &c));
        // lcm(1009, 1013) is far above the overlap, and both have ~200 elements: conservative.
        assert!(a.shares_byte(&c));
    }

    #[test]
    fn agrees_with_enumeration() {
        let mut rng = Lcg(7);
        let mut disjoint = 0;
        for _ in 0..20_000 {
            let mut span = || {
                let start = rng.next(64);
                let len = 1 + rng.next(96);
                match rng.next(3) {
                    0 => Span::range(start, start + len),
                    _ => Span::strided(start, start + len, 1 + rng.next(12), 1 + rng.next(6)),
                }
            };
            let (a, b) = (span(), span());
            let expect = naive(&a, &b);
            // Exact below MAX_WALK elements (always here: at most 96 bytes of period >= 2).
            assert_eq!(a.shares_byte(&b), expect, "{a:?} {b:?}");
            assert_eq!(b.shares_byte(&a), expect, "{b:?} {a:?}");
            disjoint += usize::from(!expect);
        }
        assert!(disjoint > 1000, "the cases exercise both answers");
    }

    #[test]
    fn gcd_of_zero_is_the_other() {
        assert_eq!(
            (gcd(0, 6), gcd(6, 0), gcd(12, 18), gcd(7, 11)),
            (6, 6, 6, 1)
        );
    }
}
