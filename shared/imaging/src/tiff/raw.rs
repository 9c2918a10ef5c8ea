use super::convert::{Px, raw_bits, rows_to_rgb, unpack};
use super::{Ifd, Setup, bad};
use crate::Result;

/// The modes Pillow memory-maps (`Image._MAPMODES`).
const MAP_MODES: [&str; 8] = ["L", "P", "RGBX", "RGBA", "CMYK", "I;16", "I;16L", "I;16B"];

/// An uncompressed file's RGB: Pillow's raw decoder reads the rows at each strip's or tile's
/// offset ([`read_raw`]), memory-mapped as Pillow maps them when `by_name` allows, then they are
/// converted a band of rows at a time.
pub(super) fn raw_rgb(ifd: &Ifd, bytes: &[u8], s: &Setup, by_name: bool) -> Result<Vec<u8>> {
    let (wu, hu) = (s.width as usize, s.height as usize);
    let layout = Layout {
        fill_reversed: s.fillorder == 2,
        planar: s.planar == 2,
        sum_bps: s.bps.iter().map(|&b| b.max(0) as usize).sum(),
        bps_count: s.bps_count,
    };
    // Pillow's raw mode is the mode itself (fill order 2 has a ";R" raw mode of its own).
    let mappable = by_name && s.raw == s.mode && s.fillorder == 1 && MAP_MODES.contains(&s.mode);
    let pixels = read_raw(ifd, bytes, wu, hu, s.raw, &layout, mappable)?;
    rows_to_rgb(s.mode, wu, hu, s.palette.as_deref(), |y, row| {
        row.copy_from_slice(&pixels[y * wu..(y + 1) * wu])
    })
}

/// What Pillow's raw tiles need to know of the file.
struct Layout {
    fill_reversed: bool,
    planar: bool,
    sum_bps: usize,
    bps_count: usize,
}

/// Pillow's raw decoder over the tiles TiffImagePlugin._setup lists: rows read from the file at
/// each strip's (or tile's) offset, whatever its byte count says, and "truncated" where the file
/// ends first.
fn read_raw(
    ifd: &Ifd,
    bytes: &[u8],
    w: usize,
    h: usize,
    raw: &str,
    layout: &Layout,
    mappable: bool,
) -> Result<Vec<Px>> {
    let (all, bw, bh) = grid(ifd, w, h)?;
    // "Every tile covers the image. Only use the last offset."
    let offsets = if bw == w && bh == h && !layout.planar {
        &all[all.len() - 1..]
    } else {
        all
    };
    let mut tiles = Tiles {
        offsets,
        w,
        h,
        bw,
        bh,
        raw,
        layout,
    };
    if let [offset] = offsets
        && mappable
    {
        tiles.map_whole(bytes, *offset)?;
    }
    if tiles.bw == 0 || tiles.bh == 0 {
        return Err(bad("strips or tiles of no size"));
    }
    // Every row is found in the file before the image is allocated: a small file that claims
    // millions of pixels is "truncated" without first taking gigabytes.
    tiles.visit_rows(bytes, |_, _, _| {})?;
    let mut out = vec![Px::default(); w * h];
    tiles.visit_rows(bytes, |at, row, dest| {
        dest.unpack(row, layout.fill_reversed, &mut out[at..at + dest.count])
    })?;
    Ok(out)
}

/// The strip or tile offsets and the size of a strip or tile: StripOffsets and RowsPerStrip (the
/// image's height without it), else TileOffsets, TileWidth and TileLength.
fn grid(ifd: &Ifd, w: usize, h: usize) -> Result<(&[i64], usize, usize)> {
    let (all, bw, bh) = if let Some(offsets) = ifd.tuple(273) {
        let rows = match ifd.single(278) {
            None => h as i64,
            Some(Ok(r)) => r,
            Some(Err(())) => -1,
        };
        (offsets, w as i64, rows)
    } else if let Some(offsets) = ifd.tuple(324) {
        let (Some(Ok(tw)), Some(Ok(th))) = (ifd.single(322), ifd.single(323)) else {
            return Err(bad("Invalid tile dimensions"));
        };
        (offsets, tw, th)
    } else {
        return Err(bad("unknown data organization"));
    };
    let all = all.map_err(|()| bad("unknown data organization"))?;
    let (Ok(bw), Ok(bh)) = (usize::try_from(bw), usize::try_from(bh)) else {
        return Err(bad("negative strip or tile size"));
    };
    Ok((all, bw, bh))
}

/// The strips or tiles of an image (`w`x`h`), each `bw`x`bh`, as Pillow's raw decoder walks them.
struct Tiles<'a> {
    offsets: &'a [i64],
    w: usize,
    h: usize,
    bw: usize,
    bh: usize,
    raw: &'a str,
    layout: &'a Layout,
}

impl<'a> Tiles<'a> {
    /// Opened by name, Pillow memory-maps an image of one tile in its own mode (ImageFile.load):
    /// every row from that tile's offset, a row apart (the tile's width where it is wider than
    /// the image), whatever its height says — when the file holds them all. That is the walk
    /// over one tile of the image's height, which this makes of the only tile, at `offset`.
    fn map_whole(&mut self, bytes: &[u8], offset: i64) -> Result<()> {
        let Ok(at) = usize::try_from(offset) else {
            return Err(bad("Tile offset cannot be negative"));
        };
        let stride = if self.bw > self.w {
            self.bw.checked_mul(self.layout.sum_bps).map(|b| b / 8)
        } else {
            let bits = raw_bits(self.raw) as usize;
            self.w.checked_mul(bits).map(|b| b.div_ceil(8))
        };
        let end = stride
            .and_then(|stride| stride.checked_mul(self.h))
            .and_then(|n| n.checked_add(at));
        if end.is_some_and(|end| end <= bytes.len()) {
            (self.bw, self.bh) = (self.bw.max(self.w), self.h);
        }
        Ok(())
    }

    /// Calls `f(first pixel, row bytes, dest)` for every row of every strip or tile in Pillow's
    /// tile order; "image file is truncated" (before any call past it) where a row is not in the
    /// file.
    fn visit_rows(&self, bytes: &[u8], mut f: impl FnMut(usize, &[u8], &Dest<'a>)) -> Result<()> {
        let (w, h, bw, bh) = (self.w, self.h, self.bw, self.bh);
        let (mut x, mut y, mut layer) = (0usize, 0usize, 0usize);
        for &offset in self.offsets {
            let (x1, y1) = ((x + bw).min(w), (y + bh).min(h));
            let (dest, row_len, stride) = self.tile(x, x1, layer)?;
            for r in 0..y1.saturating_sub(y) {
                let start = usize::try_from(offset)
                    .ok()
                    .and_then(|o| o.checked_add(r * stride))
                    .ok_or_else(|| bad("image file is truncated"))?;
                let row = bytes
                    .get(start..start.saturating_add(row_len))
                    .ok_or_else(|| bad("image file is truncated"))?;
                f((y + r) * w + x, row, &dest);
            }
            x += bw;
            if x >= w {
                x = 0;
                y += bh;
                if y >= h {
                    y = 0;
                    layer += 1;
                }
            }
        }
        Ok(())
    }

    /// The rows of the tile from column `x` to `x1` of plane `layer`: where they go, their length
    /// in bytes and the bytes from one to the next.
    fn tile(&self, x: usize, x1: usize, layer: usize) -> Result<(Dest<'a>, usize, usize)> {
        let layout = self.layout;
        let (tile_raw, band) = if layout.planar {
            let c = self
                .raw
                .as_bytes()
                .get(layer)
                .ok_or_else(|| bad("more planes than bands"))?;
            (None, band_of(*c)?)
        } else {
            (Some(self.raw), 0)
        };
        let bits = tile_raw.map_or(8, raw_bits) as usize;
        let mut stride = 0.0;
        if x + self.bw > self.w {
            stride = (self.bw * layout.sum_bps) as f64 / 8.0;
        }
        if layout.planar {
            stride /= layout.bps_count as f64;
        }
        let row_len = ((x1 - x) * bits).div_ceil(8);
        let stride = match stride as usize {
            0 => row_len,
            s => s,
        };
        let dest = Dest {
            count: x1 - x,
            raw: tile_raw,
            band,
        };
        Ok((dest, row_len, stride))
    }
}

/// Where a row of a strip or tile goes: `count` pixels, unpacked with `raw`, or (separate
/// planes) one byte each into `band`.
struct Dest<'a> {
    count: usize,
    raw: Option<&'a str>,
    band: usize,
}

impl Dest<'_> {
    /// Unpacks `row` into `out` (its `count` pixels), the bits of each byte reversed first for
    /// fill order 2.
    fn unpack(&self, row: &[u8], fill_reversed: bool, out: &mut [Px]) {
        let reversed: Vec<u8>;
        let row = if fill_reversed {
            reversed = row.iter().map(|b| b.reverse_bits()).collect();
            &reversed[..]
        } else {
            row
        };
        for (i, px) in out.iter_mut().enumerate() {
            match self.raw {
                Some(m) => *px = unpack(m, row, i),
                None => px.v[self.band] = row[i],
            }
        }
    }
}

/// The band a one-letter raw mode unpacks into (Pillow's R/G/B/A, C/M/Y/K, L, P unpackers).
fn band_of(c: u8) -> Result<usize> {
    match c {
        b'R' | b'C' | b'L' | b'P' | b'Y' => Ok(0),
        b'G' | b'M' => Ok(1),
        b'B' | b'b' => Ok(2),
        b'A' | b'K' => Ok(3),
        other => Err(bad(format!("no unpacker for band {}", other as char))),
    }
}
