//! What a user looks at after a projection: the contact sheet of a run (`--sheet`: a row per
//! image, target | projection, with the distance) and each image's video of the optimisation
//! (`--video`: target | the image of each step's w, as upstream's proj.mp4; MP4 through ffmpeg,
//! or an animated PNG).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cli_common::atomic;

/// Frames per second of the videos (upstream's proj.mp4: 10).
pub const FPS: u16 = 10;

/// How long ffmpeg may take to finish a video once its last frame is in.
const FFMPEG_DEADLINE: Duration = Duration::from_secs(120);

/// An RGB picture, HWC uint8.
#[derive(Debug, Clone, PartialEq)]
pub struct Picture {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

impl Picture {
    pub fn new(width: u32, height: u32, fill: u8) -> Picture {
        Picture {
            width,
            height,
            rgb: vec![fill; (width * height * 3) as usize],
        }
    }

    /// Copies `p` in with its top-left corner at (x, y) (clipped to this picture).
    pub fn paste(&mut self, p: &Picture, x: u32, y: u32) {
        let w = p.width.min(self.width.saturating_sub(x));
        for row in 0..p.height.min(self.height.saturating_sub(y)) {
            let src = (row * p.width * 3) as usize;
            let dst = (((y + row) * self.width + x) * 3) as usize;
            self.rgb[dst..dst + (w * 3) as usize]
                .copy_from_slice(&p.rgb[src..src + (w * 3) as usize]);
        }
    }

    /// `a` and `b` side by side (the same height).
    pub fn side_by_side(a: &Picture, b: &Picture) -> Picture {
        let mut out = Picture::new(a.width + b.width, a.height.max(b.height), 0);
        out.paste(a, 0, 0);
        out.paste(b, a.width, 0);
        out
    }

    /// `side` × `side` (the picture is square): each pixel a square when `side` is a multiple
    /// of a smaller picture's side, else Pillow's Lanczos.
    fn sized(&self, side: u32) -> Picture {
        if self.width == side && self.height == side {
            return self.clone();
        }
        let img = image::RgbImage::from_raw(self.width, self.height, self.rgb.clone())
            .expect("the size matches the pixels");
        let whole = self.width == self.height && side.is_multiple_of(self.width);
        let sized = if self.width < side && whole {
            let nearest = image::imageops::FilterType::Nearest;
            image::imageops::resize(&img, side, side, nearest)
        } else {
            imaging::resize_lanczos(&img, (0, 0, self.width, self.height), side, side)
        };
        Picture {
            width: side,
            height: side,
            rgb: sized.into_raw(),
        }
    }

    pub fn write_png(&self, path: &Path) -> Result<()> {
        atomic::write_atomic(path, |out| {
            imaging::write_png(out, &self.rgb, self.width, self.height, 3)
        })?;
        Ok(())
    }
}

/// Writes `text` with its top-left corner at (x, y) in font8x8's 8×8 glyphs (ASCII; anything
/// else as `?`).
fn draw_text(p: &mut Picture, text: &str, x: u32, y: u32, rgb: [u8; 3]) {
    for (i, c) in text.chars().enumerate() {
        let c = if c.is_ascii() && !c.is_ascii_control() {
            c
        } else {
            '?'
        };
        let gx = x + i as u32 * GLYPH;
        for (row, bits) in font8x8::legacy::BASIC_LEGACY[c as usize].iter().enumerate() {
            for col in 0..GLYPH {
                // Bit 0 is the leftmost column.
                let (px, py) = (gx + col, y + row as u32);
                if bits & (1 << col) != 0 && px < p.width && py < p.height {
                    let at = ((py * p.width + px) * 3) as usize;
                    p.rgb[at..at + 3].copy_from_slice(&rgb);
                }
            }
        }
    }
}

/// A glyph's side (and advance), pixels.
const GLYPH: u32 = 8;

/// `text` in at most `chars` characters: its end, after `...`, when longer (a path's file name
/// is what tells rows apart).
fn fitted(text: &str, chars: usize) -> String {
    let n = text.chars().count();
    if n <= chars {
        return text.to_string();
    }
    let keep = chars.saturating_sub(3);
    format!("...{}", text.chars().skip(n - keep).collect::<String>())
}

/// The contact sheet of a run: the columns named, a row per projected image (target |
/// projection, [`Sheet::MIN_CELL`] to [`Sheet::CELL`] pixels a side), its name and distance
/// under it.
#[derive(Debug)]
pub struct Sheet {
    path: PathBuf,
    side: u32,
    rows: Vec<(Picture, Picture, String, f64)>,
    left_out: usize,
}

impl Sheet {
    /// The largest side of a sheet's pictures (larger images are scaled down, Lanczos).
    pub const CELL: u32 = 256;
    /// The smallest: smaller images are scaled up by a whole factor (each pixel a square) to
    /// at least this, so that a 32×32 projection can be looked at and its name fits.
    pub const MIN_CELL: u32 = 128;
    /// The space around and between pictures, pixels.
    pub const GAP: u32 = 4;
    /// The most rows a sheet holds (the rest are counted, not drawn).
    pub const MAX_ROWS: usize = 200;

    pub fn new(path: &Path, resolution: u32) -> Sheet {
        let resolution = resolution.max(1);
        Sheet {
            path: path.to_path_buf(),
            side: match resolution {
                r if r < Self::MIN_CELL => r * Self::MIN_CELL.div_ceil(r),
                r => r.min(Self::CELL),
            },
            rows: Vec::new(),
            left_out: 0,
        }
    }

    /// A row: the input's `name`, its target and projection, and their distance.
    pub fn add(&mut self, name: &str, target: &Picture, projection: &Picture, distance: f64) {
        if self.rows.len() >= Self::MAX_ROWS {
            self.left_out += 1;
            return;
        }
        self.rows.push((
            target.sized(self.side),
            projection.sized(self.side),
            name.to_string(),
            distance,
        ));
    }

    /// Images that did not fit.
    pub fn left_out(&self) -> usize {
        self.left_out
    }

    /// The sheet's picture (`None` with no rows).
    pub fn picture(&self) -> Option<Picture> {
        if self.rows.is_empty() {
            return None;
        }
        let (side, gap, line) = (self.side, Self::GAP, GLYPH + 2);
        let width = 2 * side + 3 * gap;
        let (top, row_h) = (gap + line, side + 2 * line + gap);
        let mut p = Picture::new(width, top + row_h * self.rows.len() as u32, 255);
        let ink = [0, 0, 0];
        draw_text(&mut p, "target", gap, gap, ink);
        draw_text(&mut p, "projection", 2 * gap + side, gap, ink);
        let chars = ((width - 2 * gap) / GLYPH) as usize;
        for (i, (target, proj, name, distance)) in self.rows.iter().enumerate() {
            let y = top + row_h * i as u32;
            p.paste(target, gap, y);
            p.paste(proj, 2 * gap + side, y);
            draw_text(&mut p, &fitted(name, chars), gap, y + side + 2, ink);
            let text = format!("distance {distance:.4}");
            draw_text(&mut p, &text, gap, y + side + 2 + line, ink);
        }
        Some(p)
    }

    /// Writes the sheet (atomically); nothing without rows. Returns its path when written.
    pub fn write(&self) -> Result<Option<&Path>> {
        match self.picture() {
            Some(p) => {
                p.write_png(&self.path)
                    .with_context(|| format!("writing --sheet {}", self.path.display()))?;
                Ok(Some(&self.path))
            }
            None => Ok(None),
        }
    }
}

/// How videos are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VideoFormat {
    /// MP4 (H.264, as upstream's proj.mp4) when `ffmpeg` is on PATH, else an animated PNG.
    Auto,
    /// MP4 through `ffmpeg` (an error without it).
    Mp4,
    /// An animated PNG (APNG: browsers play it; lossless, larger).
    Apng,
}

/// Where an image's pictures go beside its `.npz`: the target as optimised against
/// (`<stem>.target.png`) and the projection (`<stem>.proj.png`), upstream's target.png and
/// proj.png.
pub fn picture_paths(npz: &Path) -> [PathBuf; 2] {
    [
        npz.with_extension("target.png"),
        npz.with_extension("proj.png"),
    ]
}

/// Where an image's video goes beside its `.npz` (`<stem>.proj.mp4` or `.proj.apng`).
pub fn video_path(npz: &Path, format: VideoFormat) -> PathBuf {
    npz.with_extension(format!("proj.{}", format.extension()))
}

impl VideoFormat {
    /// The format `auto` means here (`ffmpeg` on PATH or not).
    pub fn resolve(self) -> Result<VideoFormat> {
        let found = ffmpeg_on_path();
        match self {
            VideoFormat::Auto if found => Ok(VideoFormat::Mp4),
            VideoFormat::Auto => Ok(VideoFormat::Apng),
            VideoFormat::Mp4 if !found => cli_common::usage(
                "--video mp4 needs ffmpeg on PATH (install it, or use --video apng)",
            ),
            other => Ok(other),
        }
    }

    /// The file extension after `.proj.`.
    pub fn extension(self) -> &'static str {
        match self {
            VideoFormat::Mp4 => "mp4",
            _ => "apng",
        }
    }
}

fn ffmpeg_on_path() -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            let f = d.join("ffmpeg");
            f.is_file()
                && std::fs::metadata(&f).is_ok_and(|m| {
                    std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
                })
        })
    })
}

/// One video being written: frames go into a temp file beside the target, renamed into place
/// by [`Video::finish`] (dropped unfinished, nothing appears).
pub struct Video {
    target: PathBuf,
    kind: VideoKind,
}

enum VideoKind {
    Apng(
        png::Writer<std::io::BufWriter<std::fs::File>>,
        tempfile::NamedTempFile,
    ),
    Ffmpeg(Child, tempfile::NamedTempFile),
}

impl std::fmt::Debug for Video {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Video")
            .field("target", &self.target)
            .finish()
    }
}

impl Video {
    /// Starts `target`, of `frames` frames of `width` × `height`.
    pub fn create(
        target: &Path,
        format: VideoFormat,
        width: u32,
        height: u32,
        frames: u32,
    ) -> Result<Video> {
        let tmp = atomic::temp_beside(target)?;
        let kind = match format {
            VideoFormat::Mp4 => {
                let child = Command::new("ffmpeg")
                    .args(["-nostdin", "-y", "-loglevel", "error", "-f", "rawvideo"])
                    .args(["-pix_fmt", "rgb24", "-s", &format!("{width}x{height}")])
                    .args(["-r", &FPS.to_string(), "-i", "-"])
                    .args(["-c:v", "libx264", "-pix_fmt", "yuv420p", "-b:v", "16M"])
                    // H.264 in 4:2:0 needs even sides.
                    .args(["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-f", "mp4"])
                    .arg(tmp.path())
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .context("starting ffmpeg")?;
                VideoKind::Ffmpeg(child, tmp)
            }
            _ => {
                // The writer owns a second handle to the temp file, which stays for the rename.
                let file = tmp.reopen().context("opening the video's temp file")?;
                let mut enc = png::Encoder::new(std::io::BufWriter::new(file), width, height);
                enc.set_color(png::ColorType::Rgb);
                enc.set_depth(png::BitDepth::Eight);
                enc.set_compression(png::Compression::Fast);
                enc.set_animated(frames, 0)?;
                enc.set_frame_delay(1, FPS)?;
                VideoKind::Apng(enc.write_header()?, tmp)
            }
        };
        Ok(Video {
            target: target.to_path_buf(),
            kind,
        })
    }

    /// Appends a frame (RGB, the video's size).
    pub fn frame(&mut self, p: &Picture) -> Result<()> {
        match &mut self.kind {
            // One call, one frame (fcTL + fdAT).
            VideoKind::Apng(w, _) => w.write_image_data(&p.rgb).context("writing a frame")?,
            VideoKind::Ffmpeg(child, _) => send_frame(child, &p.rgb)?,
        }
        Ok(())
    }

    /// Ends the video and renames it into place.
    pub fn finish(self) -> Result<PathBuf> {
        let Video { target, kind } = self;
        match kind {
            VideoKind::Apng(w, tmp) => {
                w.finish().context("ending the animated PNG")?;
                atomic::persist(tmp, &target)?;
            }
            VideoKind::Ffmpeg(mut child, tmp) => {
                drop(child.stdin.take());
                let started = Instant::now();
                let status = loop {
                    if let Some(s) = child.try_wait()? {
                        break s;
                    }
                    if started.elapsed() > FFMPEG_DEADLINE {
                        let _ = child.kill();
                        let _ = child.wait();
                        bail!(
                            "ffmpeg did not finish {} within {FFMPEG_DEADLINE:?}",
                            target.display()
                        );
                    }
                    std::thread::sleep(Duration::from_millis(20));
                };
                if !status.success() {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                    bail!("ffmpeg failed ({status}): {}", err.trim());
                }
                atomic::persist(tmp, &target)?;
            }
        }
        Ok(target)
    }
}

/// Writes `bytes` to ffmpeg's stdin without ever blocking for long: the pipe is non-blocking
/// and waited on in slices, so that SIGINT/SIGTERM end the wait (exit 130) and an ffmpeg that
/// stops reading (stuck, or a stand-in that never reads) is killed after [`FFMPEG_DEADLINE`]
/// without progress, an error rather than a hang.
fn send_frame(child: &mut Child, mut bytes: &[u8]) -> Result<()> {
    use std::os::fd::AsRawFd;
    let stdin = child.stdin.as_mut().expect("ffmpeg's stdin is piped");
    let fd = stdin.as_raw_fd();
    // SAFETY: fcntl on the pipe this process owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 && flags & libc::O_NONBLOCK == 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    let mut progress = Instant::now();
    while !bytes.is_empty() {
        match stdin.write(bytes) {
            Ok(n) => {
                bytes = &bytes[n..];
                progress = Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                cli_common::interrupt::check()?;
                if progress.elapsed() > FFMPEG_DEADLINE {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("ffmpeg read nothing for {FFMPEG_DEADLINE:?}: killed");
                }
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one pollfd, valid for the call.
                unsafe { libc::poll(&mut pfd, 1, 100) };
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                cli_common::interrupt::check()?;
            }
            Err(e) => return Err(e).context("sending a frame to ffmpeg"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn solid(side: u32, v: u8) -> Picture {
        Picture::new(side, side, v)
    }

    #[test]
    fn the_sheet_names_its_columns_and_each_row() {
        let dir = tempfile::tempdir().unwrap();
        let mut sheet = Sheet::new(&dir.path().join("sheet.png"), 128);
        assert!(sheet.write().unwrap().is_none(), "no rows, no file");
        sheet.add("a/1.png", &solid(128, 10), &solid(128, 200), 0.4711);
        sheet.add("b/2.png", &solid(128, 20), &solid(128, 100), 0.5);
        let p = sheet.picture().unwrap();
        // Two pictures of 128 and three gaps of 4 across; the column names (a 10-pixel line
        // under a gap), then per row 128 + two 10-pixel lines + 4.
        let (top, row) = (4 + 10, 128 + 20 + 4);
        assert_eq!((p.width, p.height), (268, top + 2 * row));
        let at = |x: u32, y: u32| p.rgb[((y * p.width + x) * 3) as usize];
        assert_eq!((at(4, top), at(136, top)), (10, 200));
        assert_eq!((at(4, top + row), at(136, top + row)), (20, 100));
        // Text: the column names, and two lines under each row; none in the gaps.
        let dark = |y0: u32, y1: u32| (y0..y1).any(|y| (0..p.width).any(|x| at(x, y) == 0));
        assert!(dark(4, 12) && !dark(0, 4));
        assert!(dark(top + 130, top + 138) && dark(top + 140, top + 148));
        sheet.write().unwrap();
        let back = image::open(dir.path().join("sheet.png")).unwrap().to_rgb8();
        assert_eq!(back.into_raw(), p.rgb);
    }

    #[test]
    fn small_images_are_scaled_up_by_a_whole_factor_large_ones_down() {
        let dir = tempfile::tempdir().unwrap();
        let mut sheet = Sheet::new(&dir.path().join("s.png"), 512);
        sheet.add("x", &solid(512, 1), &solid(512, 2), 0.1);
        let p = sheet.picture().unwrap();
        assert_eq!(p.width, 2 * Sheet::CELL + 12);
        assert_eq!(p.rgb[(14 * p.width + 4) as usize * 3], 1);
        // 32x32 becomes 128x128, each pixel a 4x4 square.
        let mut small = Picture::new(32, 32, 0);
        small.rgb[..3].copy_from_slice(&[9, 9, 9]);
        let mut sheet = Sheet::new(&dir.path().join("s.png"), 32);
        sheet.add("x", &small, &small, 0.1);
        let p = sheet.picture().unwrap();
        assert_eq!(p.width, 2 * 128 + 12);
        let at = |x: u32, y: u32| p.rgb[((y * p.width + x) * 3) as usize];
        assert_eq!((at(4, 14), at(7, 17), at(8, 14)), (9, 9, 0));
        // 48 is scaled by 3, to 144.
        assert_eq!(Sheet::new(&dir.path().join("s.png"), 48).side, 144);
        let mut sheet = Sheet::new(&dir.path().join("s.png"), 4);
        for _ in 0..Sheet::MAX_ROWS + 3 {
            sheet.add("x", &solid(4, 1), &solid(4, 2), 0.1);
        }
        assert_eq!(sheet.left_out(), 3);
        assert_eq!(sheet.rows.len(), Sheet::MAX_ROWS);
    }

    #[test]
    fn text_is_drawn_from_the_glyphs_and_long_names_keep_their_end() {
        let mut p = Picture::new(16, 8, 255);
        draw_text(&mut p, "|.", 0, 0, [0, 0, 0]);
        // font8x8's '|' (0x18: columns 3 and 4, a gap in row 3) and '.' (0x0C in rows 5 and 6:
        // columns 2 and 3, bit 0 the leftmost).
        let inked = |x: u32, y: u32| p.rgb[((y * 16 + x) * 3) as usize] == 0;
        assert!(inked(3, 0) && inked(4, 6) && !inked(3, 3) && !inked(2, 0));
        assert!(inked(10, 5) && inked(11, 6) && !inked(12, 5) && !inked(10, 4));
        assert_eq!(fitted("short.png", 20), "short.png");
        assert_eq!(
            fitted("a/very/long/path/seed0004.png", 16),
            ".../seed0004.png"
        );
        assert_eq!(
            fitted("a/very/long/path/seed0004.png", 16).chars().count(),
            16
        );
    }

    #[test]
    fn an_animated_png_holds_every_frame_and_appears_whole() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a.proj.apng");
        let mut v = Video::create(&target, VideoFormat::Apng, 8, 4, 3).unwrap();
        for i in 0..3u8 {
            v.frame(&Picture::new(8, 4, 40 * i)).unwrap();
            assert!(!target.exists(), "not before it is finished");
        }
        v.finish().unwrap();
        let decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(&target).unwrap(),
        ));
        let mut reader = decoder.read_info().unwrap();
        assert_eq!(reader.info().animation_control().unwrap().num_frames, 3);
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let mut firsts = Vec::new();
        for _ in 0..3 {
            reader.next_frame(&mut buf).unwrap();
            firsts.push(buf[0]);
        }
        assert_eq!(firsts, [0, 40, 80]);
        // A video dropped unfinished leaves nothing.
        let other = dir.path().join("b.proj.apng");
        drop(Video::create(&other, VideoFormat::Apng, 8, 4, 3).unwrap());
        assert!(!other.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
